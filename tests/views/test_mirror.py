"""A mirror takes a batch's changes: by key, by primary key, rows rewritten in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from deltamv.compute import Compute
from deltamv.errors import DeltaMVError, StateError
from deltamv.state.keyed import KEY, ROWID, Mirror
from deltamv.views.ivm import W
from deltamv.views.mirror import (
    DuplicateKeyError,
    apply_change,
    insert_rows,
    loading,
    table_change,
)

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
    assert [t.to_pylist() for t in change.updated] == [[{ROWID: 3, "owner": "cy", "balance": 31}]]
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


def snapshot_rows(mirror: Mirror, *rows: tuple[int, str, int]) -> None:
    """Rows loaded from a snapshot: no key."""
    insert_rows(mirror, pa.table({
        KEY: pa.array([None] * len(rows), pa.string()), "id": [r[0] for r in rows],
        "owner": [r[1] for r in rows], "balance": [r[2] for r in rows]}, schema=mirror.schema))  # fmt: skip


def test_a_snapshot_row_without_a_key_is_replaced_by_primary_key(compute: Compute) -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    snapshot_rows(mirror, (1, "ann", 10))
    change = table_change(compute, mirror, changes(("k1", "PUT", 1, "ann", 12)))
    apply_change(mirror, change)
    assert sorted(held(mirror).values()) == [("k1", 1, "ann", 12)]


def test_a_snapshot_row_is_rewritten_in_place_and_takes_the_key(compute: Compute) -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    snapshot_rows(mirror, (1, "ann", 10), (2, "bob", 20), (3, "cy", 30))
    change = table_change(compute, mirror, changes(
        ("k1", "PUT", 1, "ann", 11),          # in place, takes the key
        ("k9", "PUT", 9, "dee", 90),          # new
    ))  # fmt: skip
    assert [t.to_pylist() for t in change.updated] == [
        [{ROWID: 1, KEY: "k1", "owner": "ann", "balance": 11}]]  # fmt: skip
    assert change.removed == ()
    apply_change(mirror, change)
    after = held(mirror)
    assert after[1] == ("k1", 1, "ann", 11)
    assert sorted(after.values(), key=lambda r: r[1]) == [
        ("k1", 1, "ann", 11), (None, 2, "bob", 20), (None, 3, "cy", 30), ("k9", 9, "dee", 90)]  # fmt: skip
    # both indexes find the rewritten row; the next change of k1 finds it by key
    assert mirror.lookup([KEY], pa.table({KEY: ["k1"]})).column(ROWID).to_pylist() == [1]
    assert mirror.lookup(["id"], pa.table({"id": [1]})).column(KEY).to_pylist() == ["k1"]
    again = table_change(compute, mirror, changes(("k1", "PUT", 1, "ann", 12)))
    assert [t.to_pylist() for t in again.updated] == [[{ROWID: 1, "owner": "ann", "balance": 12}]]


def test_a_snapshot_that_holds_a_primary_key_twice_is_refused() -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    snapshot_rows(mirror, (1, "ann", 10), (2, "bob", 20))
    with pytest.raises(DuplicateKeyError, match=r"holds two rows with primary key \(id=2\)"):
        snapshot_rows(mirror, (3, "cy", 30), (2, "bo", 21))  # against a row held
    with pytest.raises(DuplicateKeyError, match=r"holds two rows with primary key \(id=4\)"):
        snapshot_rows(mirror, (4, "di", 40), (5, "ed", 50), (4, "di", 41))  # within


def test_a_snapshot_loaded_in_parts_is_indexed_at_the_end_and_refused_with_a_key_twice() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    mirror = Mirror(db, "accounts", COLUMNS, ["id"])
    indexes = "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
    with loading([mirror]):
        snapshot_rows(mirror, (1, "ann", 10), (2, "bob", 20))
        assert db.execute(indexes).fetchone() == (0,)
        snapshot_rows(mirror, (3, "cy", 30))
    assert db.execute(indexes).fetchone() == (2,)
    assert mirror.lookup(["id"], pa.table({"id": [3]})).column("owner").to_pylist() == ["cy"]
    other = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    twice = r"holds two rows with primary key \(id=2\)"
    with pytest.raises(DuplicateKeyError, match=twice), loading([mirror, other]):
        snapshot_rows(other, (1, "ann", 10), (2, "bob", 20))
        snapshot_rows(other, (2, "bo", 21))  # in another part


def test_a_state_that_holds_a_primary_key_twice_is_refused_at_the_start() -> None:
    # written before the index was unique: the job cannot tell which row is the table's
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE "m_accounts" ("_key" TEXT, "id" INTEGER, "owner" TEXT,'
               ' "balance" INTEGER)')  # fmt: skip
    db.execute("INSERT INTO m_accounts VALUES ('k1', 1, 'ann', 10), ('k2', 1, 'ann', 11)")
    with pytest.raises(StateError, match="table accounts: the job's state holds two rows with"
                       " one primary key"):  # fmt: skip
        Mirror(db, "accounts", COLUMNS, ["id"])


def test_a_key_that_puts_another_keys_primary_key_is_refused(compute: Compute) -> None:
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    apply_change(mirror, table_change(compute, mirror, changes(
        ("k1", "PUT", 1, "ann", 10), ("k2", "PUT", 2, "bob", 20))))  # fmt: skip
    with pytest.raises(DuplicateKeyError, match=r"key 'k3' .* primary key \(id=1\), which"
                       r" key 'k1' holds") as caught:  # fmt: skip
        apply_change(mirror, table_change(compute, mirror, changes(
            ("k4", "PUT", 4, "di", 40), ("k3", "PUT", 1, "ann", 11))))  # fmt: skip
    assert caught.value.key == "k3"
    with pytest.raises(DuplicateKeyError, match=r"key 'k6' .* \(id=5\), which key 'k5' holds"):
        apply_change(mirror, table_change(compute, mirror, changes(
            ("k5", "PUT", 5, "ed", 50), ("k6", "PUT", 5, "ed", 51))))  # fmt: skip


def test_a_primary_key_passed_from_one_key_to_another_in_a_batch_is_no_duplicate(
    compute: Compute,
) -> None:
    # The other key's row leaves in the same batch (a DELETE, or a PUT that moves its
    # primary key): the mirror deletes before it inserts.
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    apply_change(mirror, table_change(compute, mirror, changes(
        ("k1", "PUT", 1, "ann", 10), ("k2", "PUT", 2, "bob", 20))))  # fmt: skip
    apply_change(mirror, table_change(compute, mirror, changes(
        ("k1", "DELETE", None, None, None), ("k3", "PUT", 1, "ann", 11),
        ("k2", "PUT", 7, "bob", 20), ("k4", "PUT", 2, "cy", 30))))  # fmt: skip
    assert sorted(held(mirror).values()) == [
        ("k2", 7, "bob", 20), ("k3", 1, "ann", 11), ("k4", 2, "cy", 30)]  # fmt: skip


def test_the_key_index_leaves_keyless_rows_out_and_replaces_a_full_one(
    compute: Compute,
) -> None:
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE "m_accounts" ("_key" TEXT, "id" INTEGER, "owner" TEXT,'
               ' "balance" INTEGER)')  # fmt: skip
    legacy = "m_accounts__40daebf1bfc0"  # the full index on _key an earlier state held
    db.execute(f'CREATE INDEX "{legacy}" ON "m_accounts" ("_key")')
    legacy_pk = "m_accounts__b0faac5b93fb"  # and the one on the primary key, not unique
    db.execute(f'CREATE INDEX "{legacy_pk}" ON "m_accounts" ("id")')
    mirror = Mirror(db, "accounts", COLUMNS, ["id"])
    indexes = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert legacy not in indexes and legacy_pk not in indexes
    assert sorted(sql.split(" ON ")[1] for sql in indexes.values()) == [
        '"m_accounts" ("_key") WHERE "_key" IS NOT NULL', '"m_accounts" ("id")']  # fmt: skip
    assert sum(sql.startswith("CREATE UNIQUE INDEX") for sql in indexes.values()) == 1
    snapshot_rows(mirror, (1, "ann", 10))
    apply_change(mirror, table_change(compute, mirror, changes(("k2", "PUT", 2, "bob", 20))))
    assert mirror.lookup([KEY], pa.table({KEY: ["k2"]})).column("id").to_pylist() == [2]
    plan = db.execute('EXPLAIN QUERY PLAN SELECT rowid FROM "m_accounts" WHERE "_key" = ?',
                      ("k2",)).fetchall()  # fmt: skip
    assert "INDEX" in plan[0][3] and "(_key=?)" in plan[0][3]


def test_a_delete_without_old_value_of_a_snapshot_row_stops_the_batch(compute: Compute) -> None:
    """A DELETE that names only its key cannot be matched to a snapshot row (those have
    no key): the batch fails with one line instead of leaving the row in every version.
    With the old primary key it deletes the row; a key nobody holds, when no keyless row
    is left, deletes nothing."""
    mirror = Mirror(sqlite3.connect(":memory:"), "accounts", COLUMNS, ["id"])
    insert_rows(mirror, pa.table({KEY: pa.nulls(2, pa.string()), "id": [1, 2], "owner": ["a", "b"],
                            "balance": [10, 20]}).cast(mirror.schema))  # fmt: skip
    with pytest.raises(DeltaMVError) as info:
        table_change(compute, mirror, changes(("k1", "DELETE", None, None, None)))
    assert "k1" in str(info.value) and "old_value" in str(info.value)
    assert "\n" not in str(info.value)

    with_old = changes(("k1", "DELETE", None, None, None), ("k2", "DELETE", None, None, None))
    with_old = with_old.append_column("__old_id", pa.array([1, 2], pa.int64()))
    apply_change(mirror, table_change(compute, mirror, with_old))
    assert mirror.count() == 0
    assert table_change(compute, mirror, changes(("k9", "DELETE", None, None, None))).removed == ()


def test_a_delete_naming_part_of_a_composite_primary_key_stops_the_batch(
    compute: Compute,
) -> None:
    """An old_value with one column of a two-column primary key names no row: like no
    old_value at all (it found nothing, and the snapshot row stayed; an outside check)."""
    columns = pa.schema([("day", pa.string()), ("n", pa.int64()), ("v", pa.int64())])
    mirror = Mirror(sqlite3.connect(":memory:"), "t", columns, ["day", "n"])
    insert_rows(mirror, pa.table({KEY: pa.nulls(2, pa.string()), "day": ["d1", "d1"], "n": [1, 2],
                            "v": [10, 20]}).cast(mirror.schema))  # fmt: skip
    delete = pa.table({"key": ["k1"], "op": ["DELETE"], "commit_ts": [1], "day": pa.nulls(1, pa.string()),
                       "n": pa.nulls(1, pa.int64()), "v": pa.nulls(1, pa.int64()),
                       "__old_day": ["d1"], "__old_n": pa.nulls(1, pa.int64())})  # fmt: skip
    with pytest.raises(DeltaMVError, match=r"names no whole old primary key \(old_value\)"):
        table_change(compute, mirror, delete)
    whole = delete.set_column(7, "__old_n", pa.array([2], pa.int64()))
    apply_change(mirror, table_change(compute, mirror, whole))
    left = pa.concat_tables(list(mirror.scan())).select(["day", "n", "v"]).to_pylist()
    assert left == [{"day": "d1", "n": 1, "v": 10}]


def lookups(db: sqlite3.Connection) -> list[str]:
    """The columns the mirror is looked up by, statement by statement, from now on."""
    found: list[str] = []

    def trace(sql: str) -> None:
        if "CROSS JOIN" in sql:  # KeyedTable._lookup_exact's query
            found.append(sql.rsplit(" ON ", 1)[1].split(" = ")[0])

    db.set_trace_callback(trace)
    return found


def test_once_no_row_lacks_a_key_rows_are_looked_up_by_key_alone(compute: Compute) -> None:
    db = sqlite3.connect(":memory:")
    mirror = Mirror(db, "accounts", COLUMNS, ["id"])
    snapshot_rows(mirror, (1, "ann", 10), (2, "bob", 20))
    seen = lookups(db)
    apply_change(mirror, table_change(compute, mirror, changes(("k1", "PUT", 1, "ann", 11))))
    assert seen == ['t."_key"', 't."id"']  # a snapshot row is found by its primary key

    seen.clear()
    apply_change(mirror, table_change(compute, mirror, changes(("k2", "PUT", 2, "bob", 21))))
    assert seen == ['t."_key"', 't."id"']
    assert sorted(held(mirror).values()) == [("k1", 1, "ann", 11), ("k2", 2, "bob", 21)]

    # no row without a key is left: the primary key's lookup, as costly, would find none
    seen.clear()
    change = table_change(compute, mirror, changes(
        ("k1", "PUT", 1, "ann", 12), ("k3", "PUT", 3, "cy", 30), ("k2", "DELETE", None, None, None)
    ))  # fmt: skip
    apply_change(mirror, change)
    assert seen == ['t."_key"']
    assert sorted(held(mirror).values()) == [("k1", 1, "ann", 12), ("k3", 3, "cy", 30)]
    assert sorted(change.delta.to_pylist(), key=lambda r: (r["id"], r[W])) == [
        {"id": 1, "owner": "ann", "balance": 11, W: -1},
        {"id": 1, "owner": "ann", "balance": 12, W: 1},
        {"id": 2, "owner": "bob", "balance": 21, W: -1},
        {"id": 3, "owner": "cy", "balance": 30, W: 1},
    ]
