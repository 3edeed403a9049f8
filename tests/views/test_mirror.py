"""A mirror takes a batch's changes: by key, by primary key, rows rewritten in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from deltamv.compute import Compute
from deltamv.state.keyed import KEY, ROWID, Mirror
from deltamv.views.ivm import W
from deltamv.views.mirror import apply_change, table_change

COLUMNS = pa.schema([("id", pa.int64()), ("owner", pa.string()), ("balance", pa.int64())])


@pytest.fixture
def compute(tmp_path: Path) -> Compute:
    engine = Compute(threads=1, memory_limit="256MB", temp_dir=str(tmp_path))
    yield engine  # type: ignore[misc]
    engine.close()


def changes(*rows: tuple[str, str, int | None, str | None, int | None]) -> pa.Table:
    """(key, op, id, owner, balance) rows as the release hands them over."""
    return pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.string()),
            "op": pa.array([r[1] for r in rows], pa.string()),
            "commit_ts": pa.array([1] * len(rows), pa.int64()),
            "id": pa.array([r[2] for r in rows], pa.int64()),
            "owner": pa.array([r[3] for r in rows], pa.string()),
            "balance": pa.array([r[4] for r in rows], pa.int64()),
        }
    )


def held(mirror: Mirror) -> dict[int, tuple[object, ...]]:
    rows = pa.concat_tables(list(mirror.scan(with_rowid=True))).to_pylist()
    return {r[ROWID]: (r[KEY], r["id"], r["owner"], r["balance"]) for r in rows}


def test_a_put_of_a_held_key_rewrites_its_row_in_place(compute: Compute) -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    first = table_change(compute, mirror, changes(
        ("k1", "PUT", 1, "ann", 10), ("k2", "PUT", 2, "bob", 20), ("k3", "PUT", 3, "cy", 30)))  # fmt: skip
    apply_change(mirror, first)
    before = held(mirror)

    change = table_change(compute, mirror, changes(
        ("k1", "DELETE", None, None, None),
        ("k2", "PUT", 9, "bob", 20),   # same key, new id: deleted and inserted
        ("k3", "PUT", 3, "cy", 31),    # same key and id: in place
        ("k4", "PUT", 4, "dee", 40),   # new
    ))  # fmt: skip
    assert change.updated is not None
    assert change.updated.to_pylist() == [{ROWID: 3, "owner": "cy", "balance": 31}]
    apply_change(mirror, change)
    after = held(mirror)

    assert after[3] == ("k3", 3, "cy", 31)  # the same row (rowid), its new balance
    assert sorted(after.values()) == [
        ("k2", 9, "bob", 20), ("k3", 3, "cy", 31), ("k4", 4, "dee", 40)]  # fmt: skip
    assert before[3] == ("k3", 3, "cy", 30)
    # the Z-set the views see is the same whichever way the mirror is changed
    delta = sorted(change.delta.to_pylist(), key=lambda r: (r["id"], r[W]))
    assert delta == [
        {"id": 1, "owner": "ann", "balance": 10, W: -1},
        {"id": 2, "owner": "bob", "balance": 20, W: -1},
        {"id": 3, "owner": "cy", "balance": 30, W: -1},
        {"id": 3, "owner": "cy", "balance": 31, W: 1},
        {"id": 4, "owner": "dee", "balance": 40, W: 1},
        {"id": 9, "owner": "bob", "balance": 20, W: 1},
    ]
    # lookups through both indexes still find the rows
    assert mirror.lookup([KEY], pa.table({KEY: ["k3"]})).column("balance").to_pylist() == [31]
    assert mirror.lookup(["id"], pa.table({"id": [9]})).column(KEY).to_pylist() == ["k2"]


def test_a_snapshot_row_without_a_key_is_replaced_by_primary_key(compute: Compute) -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    mirror.insert(pa.table({KEY: pa.array([None], pa.string()), "id": [1], "owner": ["ann"],
                            "balance": [10]}, schema=mirror.schema))  # fmt: skip
    change = table_change(compute, mirror, changes(("k1", "PUT", 1, "ann", 12)))
    apply_change(mirror, change)
    assert sorted(held(mirror).values()) == [("k1", 1, "ann", 12)]
