"""Hand-built change-log events for pipeline tests."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from deltamv.changelog.events import EVENT_SCHEMA


def event(region: int, type_: str, line: int = 1, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in EVENT_SCHEMA}
    row.update(file=f"region-{region}/000001.jsonl", line=line, region=region, seq=1, type=type_)
    if "value" in fields and isinstance(fields["value"], dict):
        fields["value"] = json.dumps(fields["value"], sort_keys=True, separators=(",", ":"))
    row.update(fields)
    return row


def table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)


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
