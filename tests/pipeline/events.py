"""Hand-built change-log events for pipeline tests, as the parser hands them on."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from deltamv.changelog.events import CONTROL_SCHEMA
from deltamv.pipeline.ingest import EventGroup

# One table, "t": column v (and id), primary key id.
VALUES = pa.schema(
    [("row", pa.int64()), ("id", pa.int64()), ("v", pa.int64()), ("__old_id", pa.int64())]
)


def event(region: int, type_: str, line: int = 1, **fields: Any) -> dict[str, Any]:
    return {"region": region, "type": type_, "line": line, **fields}


def group(rows: list[dict[str, Any]]) -> EventGroup:
    """The events of ``rows`` (in order), as one parsed group."""
    files = sorted({f"region-{r['region']}/000001.jsonl" for r in rows})
    control, values = [], []
    for i, r in enumerate(rows):
        row = {f.name: r.get(f.name) for f in CONTROL_SCHEMA}
        row["file"] = files.index(f"region-{r['region']}/000001.jsonl")
        row["line"] = r.get("line", i + 1)
        row["seq"] = 1
        control.append(row)
        if r["type"] in ("PREWRITE", "COMMITTED"):
            v = r.get("value") or {}
            values.append({"row": i, "id": v.get("id"), "v": v.get("v"), "__old_id": None})
    tables = {"t": pa.Table.from_pylist(values, schema=VALUES)} if values else {}
    return EventGroup(tuple(files), pa.Table.from_pylist(control, schema=CONTROL_SCHEMA), tables)


def init(
    region: int, start: str = "", end: str = "", parents: list[int] | None = None
) -> dict[str, Any]:
    return event(region, "INITIALIZED", start_key=start, end_key=end, parents=parents)


def prewrite(
    region: int, start_ts: int, key: str, value: dict[str, Any] | None, **kw: Any
) -> dict[str, Any]:
    op = "PUT" if value is not None else "DELETE"
    return event(
        region, "PREWRITE", start_ts=start_ts, table="t", key=key, op=op, value=value, **kw
    )


def commit(region: int, start_ts: int, commit_ts: int, key: str) -> dict[str, Any]:
    return event(region, "COMMIT", start_ts=start_ts, commit_ts=commit_ts, table="t", key=key)


def rollback(region: int, start_ts: int, key: str) -> dict[str, Any]:
    return event(region, "ROLLBACK", start_ts=start_ts, table="t", key=key)


def committed(
    region: int, start_ts: int, commit_ts: int, key: str, value: dict[str, Any] | None
) -> dict[str, Any]:
    op = "PUT" if value is not None else "DELETE"
    return event(
        region,
        "COMMITTED",
        start_ts=start_ts,
        commit_ts=commit_ts,
        table="t",
        key=key,
        op=op,
        value=value,
    )


def resolved(region: int, ts: int) -> dict[str, Any]:
    return event(region, "RESOLVED", ts=ts)


def retired(region: int) -> dict[str, Any]:
    return event(region, "RETIRED")
