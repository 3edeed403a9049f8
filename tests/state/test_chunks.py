"""Rows that travel whole through the state: pending, done, buffered, outbox."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from deltamv.state import STATE_FILE, StateStore
from deltamv.state import chunks as chunks_module


def txns(*pairs: tuple[int, int]) -> pa.Table:
    return pa.table(
        {"region": [r for r, _ in pairs], "start_ts": [s for _, s in pairs]},
        schema=pa.schema([("region", pa.int64()), ("start_ts", pa.int64())]),
    )


def prewrites(region: int, start_ts: int, *ids: int) -> pa.Table:
    n = len(ids)
    return pa.table({
        "region": pa.array([region] * n, pa.int64()),
        "start_ts": pa.array([start_ts] * n, pa.int64()),
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"n{i}" for i in ids], pa.string()),
    })  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / STATE_FILE, job="j", start_ts=0)


def test_pending_rows_are_found_taken_and_dropped_by_transaction(store: StateStore) -> None:
    with store.transaction():
        store.pending.add("a", prewrites(1, 10, 1, 2))
        store.pending.add("b", prewrites(1, 10, 3))
        store.pending.add("a", prewrites(2, 10, 4))
        store.pending.add("a", prewrites(1, 20, 5))
    found = store.pending.known(txns((1, 10), (1, 99), (2, 10)))
    assert sorted(found.to_pylist(), key=lambda r: r["region"]) == [
        {"region": 1, "start_ts": 10},
        {"region": 2, "start_ts": 10},
    ]

    with store.transaction():
        taken = store.pending.take(txns((1, 10)))
    assert sorted(taken) == ["a", "b"]
    assert taken["a"].equals(prewrites(1, 10, 1, 2))  # typed as they were added
    assert taken["b"].equals(prewrites(1, 10, 3))
    assert store.pending.known(txns((1, 10))).num_rows == 0

    with store.transaction():
        store.pending.drop(txns((1, 20)))
        store.pending.drop_region(2)
    assert store.pending.count() == 0
    assert store.pending.take(txns((1, 20), (2, 10))) == {}


@pytest.mark.parametrize("asked", [1, 50], ids=["fewer asked than held", "more asked"])
def test_transactions_are_found_the_same_whichever_side_is_larger(
    store: StateStore, asked: int
) -> None:
    """Pending and finished transactions looked up by a batch's: matched in SQLite when
    the state holds more than the batch asks about, read whole and matched in Arrow when
    it holds fewer."""
    with store.transaction():
        for start in (10, 20, 30):
            store.pending.add("a", prewrites(1, start, start))
        store.done.add(pa.table({
            "region": pa.array([1, 1, 2], pa.int64()),
            "start_ts": pa.array([10, 40, 40], pa.int64()),
            "commit_ts": pa.array([15, None, 45], pa.int64()),
        }))  # fmt: skip
    wanted = [(1, 20), (2, 40)] + [(3, 1000 + i) for i in range(asked - 1)]
    assert store.pending.known(txns(*wanted)).to_pylist() == [{"region": 1, "start_ts": 20}]
    assert store.done.lookup(txns(*wanted)).to_pylist() == [
        {"region": 2, "start_ts": 40, "commit_ts": 45}
    ]
    with store.transaction():
        taken = store.pending.take(txns(*wanted))
        store.pending.drop(txns((1, 30), *wanted[2:]))
    assert taken["a"].column("id").to_pylist() == [20]
    assert store.pending.known(txns((1, 10), (1, 20), (1, 30))).to_pylist() == [
        {"region": 1, "start_ts": 10}
    ]


def test_pending_rows_of_one_chunk_leave_the_others_in_it(store: StateStore) -> None:
    both = pa.concat_tables([prewrites(1, 10, 1), prewrites(1, 20, 2)])
    with store.transaction():
        store.pending.add("a", both)  # one chunk holding two transactions
        first = store.pending.take(txns((1, 10)))
        second = store.pending.take(txns((1, 20)))
    assert first["a"].column("id").to_pylist() == [1]
    assert second["a"].column("id").to_pylist() == [2]


def test_many_rows_are_kept_in_several_chunks(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunks_module, "CHUNK_ROWS", 3)
    with store.transaction():
        store.pending.add("a", prewrites(1, 10, *range(10)))
        taken = store.pending.take(txns((1, 10)))
    assert sorted(taken["a"].column("id").to_pylist()) == list(range(10))


def test_done_transactions_are_looked_up_and_pruned(store: StateStore) -> None:
    finished = pa.table(
        {"region": [1, 1, 2], "start_ts": [10, 20, 10], "commit_ts": [15, None, 30]}
    )
    with store.transaction():
        store.done.add(finished)
    found = store.done.lookup(txns((1, 10), (1, 20), (3, 10)))
    assert sorted(found.to_pylist(), key=lambda r: r["start_ts"]) == [
        {"region": 1, "start_ts": 10, "commit_ts": 15},
        {"region": 1, "start_ts": 20, "commit_ts": None},  # rolled back
    ]
    with store.transaction():
        store.done.prune(20)  # complete at or below the watermark; rollbacks go too
    assert store.done.lookup(txns((1, 10), (1, 20), (2, 10))).to_pylist() == [
        {"region": 2, "start_ts": 10, "commit_ts": 30}
    ]
    with store.transaction():
        store.done.drop_region(2)
    assert store.done.lookup(txns((2, 10))).num_rows == 0


def test_the_buffer_gives_back_every_chunk_with_a_row_at_or_below_the_watermark(
    store: StateStore,
) -> None:
    def rows(*commit_ts: int) -> pa.Table:
        return pa.table({"commit_ts": pa.array(commit_ts, pa.int64()), "v": list(commit_ts)})

    with store.transaction():
        store.buffer.add("a", rows(5, 50))
        store.buffer.add("b", rows(20))
        store.buffer.add("a", rows(60, 70))
    assert store.buffer.count() == 5
    with store.transaction():
        taken = list(store.buffer.take(20))
    assert [(t, r.column("commit_ts").to_pylist()) for t, r in taken] == [
        ("a", [5, 50]),  # whole chunks: the caller keeps 50 with add()
        ("b", [20]),
    ]
    assert store.buffer.count() == 2


def test_the_outbox_holds_a_batch_until_it_is_finished(store: StateStore) -> None:
    change = pa.table({"id": [1, 2], "__w": pa.array([1, -1], pa.int64())})
    with store.transaction():
        store.outbox.put(3, "view:v", "delta", [change, change])
        store.outbox.put(3, "view:w", "none")
        store.outbox.put(4, "view:v", "recompute")
    entries = store.outbox.entries(3)
    assert {t: e.kind for t, e in entries.items()} == {"view:v": "delta", "view:w": "none"}
    assert [t.equals(change) for t in store.outbox.read(entries["view:v"])] == [True, True]
    assert list(store.outbox.read(entries["view:w"])) == []

    with store.transaction():  # a replayed batch stages its entry again: it replaces the old
        store.outbox.put(3, "view:v", "rebuild")
    assert store.outbox.entries(3)["view:v"].chunks == ()

    store.finish_batch(3, committed_watermark=None, duration_ms=1)
    assert store.outbox.batches() == [4]
    with pytest.raises(ValueError, match="unknown outbox kind"):
        store.outbox.put(5, "view:v", "append")


def test_kept_rows_of_an_earlier_version_take_the_columns_names_of_this_one(
    store: StateStore,
) -> None:
    """A column named like a field the job keeps beside it travels under another name
    (``schema.change_column``); rows an earlier version kept pending or buffered under
    its declared name are renamed at the start, the fields beside them left alone."""
    from deltamv.pipeline.match import renamed_since_kept

    declared = ["id", "key", "_op", "__n", "__old_id", "__old_x", "#key"]
    renames = renamed_since_kept(declared, ["id"])
    assert renames == {"_op": "#_op", "__n": "#__n", "__old_x": "#__old_x", "#key": "##key"}
    kept = {
        "region": [1], "start_ts": [10], "key": ["t/1"], "op": ["PUT"], "id": [1],
        "_op": [7], "__old_x": ["x"], "#key": ["h"], "__old_id": pa.array([None], pa.int64()),
    }  # fmt: skip
    with store.transaction():
        store.pending.add("t", pa.table(kept))
        store.buffer.add("t", pa.table({**kept, "commit_ts": [11]}))
        store.buffer.add("u", pa.table({**kept, "commit_ts": [11]}))  # another table
    assert store.rename_chunk_columns({"t": renames}) == 2
    assert store.rename_chunk_columns({"t": renames}) == 0  # once
    with store.transaction():
        (pending,) = store.pending.take(txns((1, 10))).values()
        buffered = dict(store.buffer.take(100))
    for rows in (pending, buffered["t"]):
        assert {"key", "op", "#_op", "#__old_x", "##key", "__old_id"} <= set(rows.column_names)
        assert rows.column("#_op").to_pylist() == [7] and rows.column("key").to_pylist() == ["t/1"]
    assert "_op" in buffered["u"].column_names
