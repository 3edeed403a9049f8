from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from deltamv.schema import TableSchema

TABLES = {
    "accounts": TableSchema.from_ddl("id BIGINT NOT NULL, owner STRING, balance BIGINT"),
    "orders": TableSchema.from_ddl(
        "id INT, amount DECIMAL(10,2), rate DOUBLE, small TINYINT, paid BOOLEAN, day DATE, "
        "at TIMESTAMP"
    ),
}


def write_segment(
    changelog: Path,
    region: int,
    seq: int,
    events: Iterable[dict[str, Any] | str],
    ext: str = "jsonl",
) -> Path:
    """Write a JSONL segment the way the contract says: under a temp name, then rename."""
    folder = changelog / f"region-{region}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{seq}.tmp"
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    final = folder / f"{seq:06d}.{ext}"
    os.replace(tmp, final)
    return final


def put(
    region: int, start_ts: int, key: str, value: dict[str, Any], table: str = "accounts", **kw: Any
) -> dict[str, Any]:
    return {
        "region": region,
        "type": "PREWRITE",
        "start_ts": start_ts,
        "table": table,
        "key": key,
        "op": "PUT",
        "value": value,
        **kw,
    }


def commit(
    region: int, start_ts: int, commit_ts: int, key: str, table: str = "accounts"
) -> dict[str, Any]:
    return {
        "region": region,
        "type": "COMMIT",
        "start_ts": start_ts,
        "commit_ts": commit_ts,
        "table": table,
        "key": key,
    }


def resolved(region: int, ts: int) -> dict[str, Any]:
    return {"region": region, "type": "RESOLVED", "ts": ts}


@pytest.fixture
def changelog(tmp_path: Path) -> Path:
    path = tmp_path / "changelog"
    path.mkdir()
    return path
