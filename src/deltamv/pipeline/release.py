"""The buffer's release: committed rows at or below the watermark leave, once each.

Committed rows wait in the state's buffer (:class:`~deltamv.state.chunks.Buffer`) until
the global watermark passes their commit ts. A row version is identified by
``(key, start_ts)``: one seen twice (a retransmission, a successor region's re-emission)
is released once. What a batch releases is reduced to each key's *last* change (the one
with the highest commit ts): the outputs are the tables as they stand at the watermark,
so intermediate versions of a row within one batch never reach them. (Within a
transaction each key is written at most once, so a primary-key change is a DELETE of the
old key and a PUT of the new one, two keys: both survive the reduction.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.compute import Compute
from deltamv.state.chunks import Buffer

__all__ = ["Released", "release"]


@dataclass(frozen=True)
class Released:
    """Per table, each released key's last change: ``key, op, commit_ts`` then the
    table's columns and ``__old_<pk>`` columns. ``rows`` counts the row versions released."""

    changes: Mapping[str, pa.Table]
    rows: int


_LAST_PER_KEY = """
SELECT * EXCLUDE (start_ts, _n, _first, _last) FROM (
    SELECT *, row_number() OVER (PARTITION BY key ORDER BY commit_ts DESC, start_ts DESC) AS _last
    FROM (
        SELECT *, row_number() OVER (PARTITION BY key, start_ts ORDER BY _n) AS _first FROM r
    ) WHERE _first = 1
) WHERE _last = 1 ORDER BY key
"""


def release(
    compute: Compute, buffer: Buffer, committed: Mapping[str, pa.Table], *, watermark: int
) -> Released:
    """Release every buffered or newly committed row with ``commit_ts <= watermark``; keep
    the others buffered. Runs inside the batch's state transaction."""
    candidates: dict[str, list[pa.Table]] = {t: [rows] for t, rows in committed.items()}
    for table, rows in buffer.take(watermark):
        candidates.setdefault(table, []).append(rows)
    changes: dict[str, pa.Table] = {}
    released_rows = 0
    for table, parts in candidates.items():
        rows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        due = pc.less_equal(rows.column("commit_ts"), watermark)
        buffer.add(table, rows.filter(pc.invert(due)))
        out = rows.filter(due)
        if out.num_rows == 0:
            continue
        out = out.append_column("_n", pa.array(range(out.num_rows), pa.int64()))
        unique = (
            compute.query(
                "SELECT count(*) FROM (SELECT DISTINCT key, start_ts FROM r)",
                r=out.select(["key", "start_ts"]),
            )
            .column(0)[0]
            .as_py()
        )
        released_rows += int(unique)
        last = compute.query(_LAST_PER_KEY, r=out)
        changes[table] = last.select(
            [
                "key",
                "op",
                "commit_ts",
                *[c for c in last.column_names if c not in ("key", "op", "commit_ts")],
            ]
        )
    return Released(changes, released_rows)
