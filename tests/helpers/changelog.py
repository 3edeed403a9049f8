"""Hand-written change logs: events as the format defines them (docs/changelog-format.md),
published the way a producer must publish a segment (a hidden name, then a rename)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from deltamv.schema import TableSchema

Event = dict[str, Any]

#: The tables the hand-written logs write: accounts, and orders with a column of each type.
TABLES = {
    "accounts": TableSchema.from_ddl("id BIGINT NOT NULL, owner STRING, balance BIGINT"),
    "orders": TableSchema.from_ddl(
        "id INT, amount DECIMAL(10,2), rate DOUBLE, small TINYINT, paid BOOLEAN, day DATE, "
        "at TIMESTAMP"
    ),
}


def lines(events: Iterable[Event | str]) -> str:
    """Segment text: one JSON object (or a given raw line) per line."""
    return "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events)


def write_segment(
    changelog: Path, region: int, seq: int, events: Iterable[Event | str] | str, ext: str = "jsonl"
) -> Path:
    """Publish ``region-<region>/<seq>.<ext>`` (six digits): written under a name starting
    with ``.``, then renamed into place. ``events`` is the whole text or its events."""
    folder = changelog / f"region-{region}"
    folder.mkdir(parents=True, exist_ok=True)
    text = events if isinstance(events, str) else lines(events)
    tmp = folder / f".{seq}.tmp"
    tmp.write_text(text, encoding="utf-8")
    final = folder / f"{seq:06d}.{ext}"
    os.replace(tmp, final)
    return final


def put(
    region: int, start_ts: int, key: str, value: dict[str, Any], table: str = "accounts", **kw: Any
) -> Event:
    """A PREWRITE of a PUT."""
    return {
        "region": region, "type": "PREWRITE", "start_ts": start_ts, "table": table, "key": key,
        "op": "PUT", "value": value, **kw,
    }  # fmt: skip


def commit(region: int, start_ts: int, commit_ts: int, key: str, table: str = "accounts") -> Event:
    return {
        "region": region, "type": "COMMIT", "start_ts": start_ts, "commit_ts": commit_ts,
        "table": table, "key": key,
    }  # fmt: skip


def resolved(region: int, ts: int) -> Event:
    return {"region": region, "type": "RESOLVED", "ts": ts}


def initialized(region: int, start_key: str, end_key: str) -> Event:
    return {"region": region, "type": "INITIALIZED", "start_key": start_key, "end_key": end_key}
