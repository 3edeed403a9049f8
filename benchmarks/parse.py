"""Driver-side parsing throughput: ``batch.parse_segments`` against the reference path.

Parses every segment of a simulated bank log (``deltamv simulate bank --txns 13000
--seed 1`` by default, ~88k events) in groups of N segments, single-threaded, and prints
events/s and MB/s for:

- ``fast``: ``parse_segments`` (read + fingerprint + parse + validate + typed values);
- ``pyarrow.json``: ``pyarrow.json.read_json`` alone over the same bytes, concatenated
  per group, with the fast path's explicit schema: no reading, hashing or checks. The
  floor the fast path is measured against (the machine's speed drifts; this row drifts
  with it);
- ``reference``: ``format.read_segment`` per segment (what the Spark executors run
  today), plus ``values_to_arrow`` over its value texts for the same typed values.

Times are the best and the median of ``--repeat`` runs, both CPU time of this process
and wall time; the load average before and after is printed with them, since the
machine is shared. Never asserts a time.

    .venv/bin/python benchmarks/parse.py [--log DIR] [--groups 16 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow.json as pj
from _common import say, simulated

from deltamv.changelog._plan import plan_for
from deltamv.changelog.batch import ParseStats, parse_segments
from deltamv.changelog.format import read_segment, values_to_arrow
from deltamv.changelog.segments import Segment, list_segments
from deltamv.config import load_config
from deltamv.schema import TableSchema


def _timed(run: Callable[[], int], repeat: int) -> tuple[int, list[float], list[float]]:
    cpu, wall = [], []
    events = 0
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        events = run()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return events, cpu, wall


def _groups(segments: Sequence[Segment], size: int) -> list[Sequence[Segment]]:
    return [segments[i : i + size] for i in range(0, len(segments), size)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="a `deltamv simulate` output folder")
    parser.add_argument("--txns", type=int, default=13000)
    parser.add_argument("--groups", type=int, nargs="+", default=[16, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-repeat", type=int, default=2)
    args = parser.parse_args(argv)

    root = args.log or simulated(f"parse-bank-{args.txns}", txns=args.txns, seed=1)
    config = load_config(root / "config.toml")
    tables: dict[str, TableSchema] = {n: t.schema for n, t in config.tables.items()}
    keys = {n: list(t.primary_key) for n, t in config.tables.items()}
    segments = [s for segs in list_segments(str(root / "changelog")).values() for s in segs]
    size = sum(os.path.getsize(s.path) for s in segments)
    say(f"{root}: {len(segments)} segments, {size / 2**20:.1f} MB")

    plan = plan_for(tuple(tables.items()), tuple((t, tuple(c)) for t, c in keys.items()))
    rows: list[tuple[str, int, int, list[float], list[float], str]] = []
    load_before = os.getloadavg()
    for group in args.groups:
        batches = _groups(segments, group)

        def fast(batches: list[Sequence[Segment]] = batches) -> int:
            return sum(parse_segments(b, tables, keys)[0].events.num_rows for b in batches)

        fast()  # warm: imports, caches, allocator
        events, cpu, wall = _timed(fast, args.repeat)
        stats = ParseStats()
        for b in batches:
            parse_segments(b, tables, keys, stats=stats)
        note = f"{stats.reference_segments} of {len(segments)} segments on the reference path"
        rows.append(("fast", group, events, cpu, wall, note))
        say(f"fast, groups of {group}: done")

        blobs = [b"".join(Path(s.path).read_bytes() for s in b) for b in batches]

        def bare(blobs: list[bytes] = blobs) -> int:
            n = 0
            for blob in blobs:
                table = pj.read_json(
                    io.BytesIO(blob),
                    read_options=pj.ReadOptions(use_threads=False, block_size=len(blob) + 1),
                    parse_options=pj.ParseOptions(
                        explicit_schema=plan.json_schema, unexpected_field_behavior="infer"
                    ),
                )
                n += table.num_rows
            return n

        bare()
        events, cpu, wall = _timed(bare, args.repeat)
        rows.append(("pyarrow.json", group, events, cpu, wall, "read_json alone, same schema"))

    def reference() -> int:
        n = 0
        for s in segments:
            table = read_segment(s, tables)
            n += table.num_rows
        return n

    def reference_typed() -> int:
        n = 0
        for s in segments:
            table = read_segment(s, tables)
            n += table.num_rows
            names = table.column("table").to_pylist()
            texts = table.column("value").to_pylist()
            for name, schema in tables.items():
                values_to_arrow([t for t, m in zip(texts, names, strict=True) if m == name], schema)
        return n

    events, cpu, wall = _timed(reference, args.reference_repeat)
    rows.append(("reference", 1, events, cpu, wall, "format.read_segment"))
    events, cpu, wall = _timed(reference_typed, args.reference_repeat)
    rows.append(("reference+typed", 1, events, cpu, wall, "+ values_to_arrow per table"))
    load_after = os.getloadavg()

    print()
    print(f"log: {root} ({events} events, {len(segments)} segments, {size / 2**20:.1f} MB)")
    print(
        f"load average: before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} CPUs)"
    )
    head = (
        f"{'path':<16} {'group':>5} {'events/s cpu':>13} {'(median)':>10} "
        f"{'events/s wall':>14} {'(median)':>10} {'MB/s cpu':>9}  note"
    )
    print(head)
    print("-" * len(head))
    for name, group, n, cpu, wall, note in rows:
        print(
            f"{name:<16} {group:>5} {n / min(cpu):>13,.0f} {n / statistics.median(cpu):>10,.0f} "
            f"{n / min(wall):>14,.0f} {n / statistics.median(wall):>10,.0f} "
            f"{size / 2**20 / min(cpu):>9.1f}  {note}"
        )


if __name__ == "__main__":
    main()
