"""TableSink micro-benchmark: what one commit costs, by table size and kind of change.

For a 1,000,000- and a 10,000,000-row table (layout on an int64 key, built with one
Replace), commits Z-sets of 1,000 changed rows: updates of random keys, updates of a
run of consecutive keys, and appends of increasing new keys; then a growing table
(``--appends`` appends in a row: the files it ends with show whether small appended
files merge); then a tiny one-file table (a view of a few rows). Prints, per scenario, the median time per commit, the files a
commit removed and added, and the rows and bytes it wrote, with the load average. Never
asserts a time: the machine is shared.

    .venv/bin/python benchmarks/sink.py [--sizes 1000000 10000000] [--commits 5] [--appends 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import WORK, say

from deltamv.delta import (
    DEFAULT_TARGET_FILE_ROWS,
    CommitResult,
    Delta,
    NoChange,
    Replace,
    TableSink,
)

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("n", pa.int64())]
)


@dataclass(frozen=True)
class Row:
    scenario: str
    table_rows: int
    files: int
    commits: int
    median_ms: float
    max_ms: float
    removed: float
    added: float
    rows_written: float
    mb_written: float
    load: str


def _rows(ids: np.ndarray, version: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pc.binary_join_element_wise(
                "name-", pc.cast(pa.array(ids, pa.int64()), pa.string()), ""
            ),
            "amount": pa.array(ids * 0.5 + version),
            "n": pa.array(np.full(len(ids), version, np.int64)),
        }
    )


def _zset(remove: pa.Table | None, add: pa.Table | None) -> Delta:
    parts = []
    for table, w in ((remove, -1), (add, 1)):
        if table is not None:
            parts.append(table.append_column("__w", pa.array(np.full(table.num_rows, w))))
    return Delta(pa.concat_tables(parts))


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class Table:
    """A benchmark table and what the job would know of it: its rows' versions."""

    def __init__(self, path: Path, rows: int, target: int) -> None:
        shutil.rmtree(path, ignore_errors=True)
        self.sink = TableSink(
            str(path),
            SCHEMA,
            layout=["id"],
            app_id="bench",
            metadata={"deltamv.job": "bench"},
            target_file_rows=target,
        )
        self.rows = rows
        self.next_id = rows
        self.version_of = np.zeros(rows, np.int64)  # the payload version each id holds
        self.batch = 0
        self.table_version: int | None = None

    def commit(self, change: Delta | Replace | NoChange) -> tuple[float, CommitResult]:
        self.batch += 1
        start = time.perf_counter()
        result = self.sink.commit(
            self.batch,
            change,
            metadata={"deltamv.watermark": str(self.batch)},
            expected_version=self.table_version,
        )
        elapsed = time.perf_counter() - start
        self.table_version = result.version
        return elapsed, result

    def update(self, ids: np.ndarray) -> Delta:
        old = _rows(ids, 0)
        old = old.set_column(2, "amount", pa.array(ids * 0.5 + self.version_of[ids]))
        old = old.set_column(3, "n", pa.array(self.version_of[ids]))
        self.version_of[ids] += 1
        new = _rows(ids, 0)
        new = new.set_column(2, "amount", pa.array(ids * 0.5 + self.version_of[ids]))
        new = new.set_column(3, "n", pa.array(self.version_of[ids]))
        return _zset(old, new)

    def append(self, count: int) -> Delta:
        ids = np.arange(self.next_id, self.next_id + count)
        self.next_id += count
        self.version_of = np.concatenate([self.version_of, np.zeros(count, np.int64)])
        return _zset(None, _rows(ids, 0))


def _scenario(
    name: str, table: Table, make: Callable[[], Delta | NoChange | Replace], commits: int
) -> Row:
    times, results = [], []
    load_before = _load()
    for _ in range(commits):
        change = make()
        elapsed, result = table.commit(change)
        times.append(elapsed)
        results.append(result)
    files = len(table.sink.handle.files())
    row = Row(
        scenario=name,
        table_rows=table.next_id,
        files=files,
        commits=commits,
        median_ms=statistics.median(times) * 1000,
        max_ms=max(times) * 1000,
        removed=statistics.mean(r.files_removed for r in results),
        added=statistics.mean(r.files_added for r in results),
        rows_written=statistics.mean(r.rows_written for r in results),
        mb_written=statistics.mean(r.bytes_written for r in results) / 2**20,
        load=f"{load_before} -> {_load()}",
    )
    say(f"{name}: {row.median_ms:.0f} ms median, {row.removed:.1f} files rewritten")
    return row


def run(sizes: list[int], commits: int, target: int, changed: int, appends: int) -> list[Row]:
    rng = np.random.default_rng(7)
    out = []
    for size in sizes:
        path = WORK / "sink" / f"t{size}"
        table = Table(path, size, target)
        say(f"building a {size:,}-row table with one Replace")
        data = _rows(rng.permutation(size), 0)
        elapsed, result = table.commit(Replace(data))
        del data
        out.append(
            Row(
                "initial Replace (shuffled)",
                size,
                result.files_added,
                1,
                elapsed * 1000,
                elapsed * 1000,
                result.files_removed,
                result.files_added,
                result.rows_written,
                result.bytes_written / 2**20,
                _load(),
            )
        )
        say(f"built in {elapsed:.1f} s: {result.files_added} files")
        out.append(
            _scenario(
                f"update {changed:,} random keys",
                table,
                lambda t=table: t.update(rng.choice(t.rows, changed, replace=False)),
                commits,
            )
        )
        out.append(
            _scenario(
                f"update {changed:,} consecutive keys",
                table,
                lambda t=table: t.update(
                    np.arange(s := int(rng.integers(0, t.rows - changed)), s + changed)
                ),
                commits,
            )
        )
        out.append(
            _scenario(
                f"append {changed:,} increasing keys",
                table,
                lambda t=table: t.append(changed),
                commits,
            )
        )
        out.append(_scenario("no change", table, NoChange, commits))
        if appends:
            out.append(
                _scenario(
                    f"grow: {appends} appends of {changed:,}",
                    table,
                    lambda t=table: t.append(changed),
                    appends,
                )
            )
        shutil.rmtree(path, ignore_errors=True)

    tiny = Table(WORK / "sink" / "tiny", 5, target)
    tiny.commit(Replace(_rows(np.arange(5), 0)))
    out.append(
        _scenario("tiny: update 1 row", tiny, lambda: tiny.update(np.array([2])), commits * 4)
    )
    out.append(
        _scenario(
            "tiny: Replace 5 rows",
            tiny,
            lambda: Replace(_rows(np.arange(5), tiny.batch)),
            commits * 4,
        )
    )
    out.append(_scenario("tiny: no change", tiny, NoChange, commits * 4))
    shutil.rmtree(WORK / "sink", ignore_errors=True)
    return out


def _print(rows: list[Row]) -> None:
    header = (
        f"{'scenario':34} {'rows':>11} {'files':>5} {'n':>3} {'median ms':>9} {'max ms':>8}"
        f" {'rewritten':>9} {'added':>6} {'rows written':>12} {'MB written':>10}  load (1/5/15 min)"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.scenario:34} {r.table_rows:>11,} {r.files:>5} {r.commits:>3} {r.median_ms:>9.0f}"
            f" {r.max_ms:>8.0f} {r.removed:>9.1f} {r.added:>6.1f} {r.rows_written:>12,.0f}"
            f" {r.mb_written:>10.1f}  {r.load}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--commits", type=int, default=5, help="commits per scenario")
    parser.add_argument("--changed", type=int, default=1_000, help="rows changed per commit")
    parser.add_argument("--target-file-rows", type=int, default=DEFAULT_TARGET_FILE_ROWS)
    parser.add_argument("--appends", type=int, default=200, help="appends of the growth run")
    args = parser.parse_args()
    say(f"load average {_load()}, {os.cpu_count()} cpus")
    rows = run(args.sizes, args.commits, args.target_file_rows, args.changed, args.appends)
    print()
    _print(rows)


if __name__ == "__main__":
    main()
