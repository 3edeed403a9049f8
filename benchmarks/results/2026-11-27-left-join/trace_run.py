"""`deltamv run --once job.toml` with every `KeyedTable.lookup` and `first` counted and
timed per (table, columns): printed as TRACE lines on stderr when the run ends."""

from __future__ import annotations

import atexit
import collections
import sys
import time
from typing import Any

from deltamv.cli import main
from deltamv.state import keyed

stats: dict[tuple[str, ...], list[float]] = collections.defaultdict(lambda: [0, 0, 0, 0.0])
_lookup, _first = keyed.KeyedTable.lookup, keyed.KeyedTable.first


def _count(key: tuple[str, ...], keys: int, rows: int, began: float) -> None:
    s = stats[key]
    s[0] += 1
    s[1] += keys
    s[2] += rows
    s[3] += time.perf_counter() - began


def lookup(self: keyed.KeyedTable, columns: Any, keys: Any, **kw: Any) -> Any:
    began = time.perf_counter()
    out = _lookup(self, columns, keys, **kw)
    _count((self.name, *columns, "lookup"), keys.num_rows, out.num_rows, began)
    return out


def first(self: keyed.KeyedTable, columns: Any, key: Any, order: str, **kw: Any) -> Any:
    began = time.perf_counter()
    out = _first(self, columns, key, order, **kw)
    _count((self.name, *columns, "first:" + order), key.num_rows, out.num_rows, began)
    return out


@atexit.register
def _dump() -> None:
    for k, (calls, keys, rows, s) in sorted(stats.items(), key=lambda kv: -kv[1][3]):
        print(f"TRACE {k} calls {calls} keys {keys} rows {rows} s {s:.2f}", file=sys.stderr)


keyed.KeyedTable.lookup = lookup  # type: ignore[method-assign]
keyed.KeyedTable.first = first  # type: ignore[method-assign]
sys.argv = ["deltamv", "run", "--once", "job.toml"]
main()
