from __future__ import annotations

import json
import os

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from deltamv.delta import (
    CommitResult,
    Delta,
    NoChange,
    Replace,
    TableSink,
    layout,
    read_arrow,
    versions,
)
from deltamv.delta import table as table_module
from deltamv.errors import CommitConflictError, DeltaMVError, StateError, StorageError

from ._tables import bag, data_actions, files_in_log, files_on_disk, log, read_version

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
APP = "deltamv:orders"


def _sink(path: str, *, target: int = 100, schema: pa.Schema = SCHEMA, **kw: object) -> TableSink:
    return TableSink(
        path,
        schema,
        layout=["k"],
        app_id=APP,
        metadata={"deltamv.job": "orders"},
        target_file_rows=target,
        **kw,  # type: ignore[arg-type]
    )


def _rows(keys: list[int] | np.ndarray, tag: str = "v") -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "v": [f"{tag}{k}" for k in keys]})


def _zset(*parts: tuple[pa.Table, int]) -> Delta:
    tables = [t.append_column("__w", pa.array([w] * t.num_rows, pa.int64())) for t, w in parts]
    return Delta(pa.concat_tables(tables))


def _commit(sink: TableSink, batch: int, change, expected: int | None) -> CommitResult:  # type: ignore[no-untyped-def]
    return sink.commit(
        batch, change, metadata={"deltamv.watermark": str(batch * 10)}, expected_version=expected
    )


def _thousand(path: str) -> TableSink:
    """A table of keys 0..999 in 10 files of 100 keys."""
    sink = _sink(path)
    _commit(sink, 1, Replace(_rows(np.arange(1000))), None)
    return sink


def test_a_replace_creates_the_table_as_version_0_with_its_layout(tmp_path) -> None:
    path = str(tmp_path / "t")
    rows = _rows(np.random.default_rng(1).permutation(1000))

    result = _commit(_sink(path), 1, Replace(rows), None)

    assert (result.version, result.skipped, result.files_added) == (0, False, 10)
    assert (result.rows_written, result.files_removed) == (1000, 0)
    assert result.bytes_written == sum(
        os.path.getsize(os.path.join(path, f)) for f in files_on_disk(path)
    )
    assert read_arrow(path).sort_by("k") == _rows(np.arange(1000))
    stats = [json.loads(a["add"]["stats"]) for a in log(path, 0) if "add" in a]
    bounds = sorted((s["minValues"]["k"], s["maxValues"]["k"]) for s in stats)
    assert bounds == [(i * 100, i * 100 + 99) for i in range(10)]


def test_a_change_in_one_range_rewrites_that_file_only(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    before = {
        json.loads(a["add"]["stats"])["minValues"]["k"]: a["add"]["path"]
        for a in log(path, 0)
        if "add" in a
    }

    change = _zset((_rows([505]), -1), (_rows([505], "new"), 1), (_rows([550, 551]), -1))
    result = _commit(sink, 2, change, 0)

    removed, added = data_actions(path, 1)
    assert removed == [before[500]]
    assert len(added) == 1
    assert (result.files_removed, result.files_added, result.rows_written) == (1, 1, 98)
    expected = _rows([k for k in range(1000) if k not in (505, 550, 551)])
    expected = pa.concat_tables([expected, _rows([505], "new")])
    assert bag(read_version(path)) == bag(expected)


def test_changes_in_two_ranges_rewrite_two_files(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)

    _commit(sink, 2, _zset((_rows([5]), -1), (_rows([905]), -1), (_rows([905], "x"), 1)), 0)

    removed, added = data_actions(path, 1)
    assert (len(removed), len(added)) == (2, 2)


def test_a_change_in_every_range_rewrites_every_file_on_threads_and_keeps_every_row(
    tmp_path,
) -> None:
    """A change at keys spread over the whole table (as random keys of a large table
    are) rewrites each file once, the files on threads at once (``_rewrite``)."""
    path = str(tmp_path / "t")
    sink = _thousand(path)
    changed = list(range(7, 1000, 100))  # one key in each of the ten files

    result = _commit(sink, 2, _zset((_rows(changed), -1), (_rows(changed, "new"), 1)), 0)

    removed, added = data_actions(path, 1)
    assert (len(removed), len(added), result.rows_written) == (10, 10, 1000)
    expected = pa.concat_tables(
        [_rows([k for k in range(1000) if k not in changed]), _rows(changed, "new")]
    )
    assert bag(read_version(path)) == bag(expected)
    assert files_on_disk(path) == files_in_log(path)


def test_of_two_rewrites_failing_on_threads_the_first_is_named_and_nothing_stays(
    tmp_path,
) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    changed = list(range(7, 1000, 100))
    change = _zset(
        (_rows(changed), -1),
        (_rows(changed, "new"), 1),
        (_rows([350, 750], "other"), -1),  # rows the table does not hold, in files 4 and 8
    )

    with pytest.raises(StateError, match=r'does not hold a row the job removes \(\{"k": 350'):
        _commit(sink, 2, change, 0)

    assert DeltaTable(path).version() == 0
    assert files_on_disk(path) == files_in_log(path)  # the rewrites' files are deleted


def test_appends_of_increasing_keys_touch_only_the_last_file_and_keep_files_full(
    tmp_path,
) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    last = max(
        (a["add"] for a in log(path, 0) if "add" in a),
        key=lambda a: json.loads(a["stats"])["maxValues"]["k"],
    )["path"]

    for batch in range(2, 12):
        start = 1000 + (batch - 2) * 37
        result = _commit(sink, batch, _zset((_rows(np.arange(start, start + 37)), 1)), batch - 2)
        removed, added = data_actions(path, result.version)
        assert removed == [last]
        last = max(added, key=lambda p: pq.read_table(os.path.join(path, p))["k"][-1].as_py())

    sizes = sorted(t.num_rows for t in _files(path))
    assert sum(sizes) == 1370
    assert sizes == [70] + [100] * 13  # only the last file is partly filled
    assert bag(read_version(path)) == bag(_rows(np.arange(1370)))


def test_small_appends_beyond_a_full_last_file_go_to_files_of_their_own(tmp_path) -> None:
    # The last file holds 100 rows: an append of 10 (100 > 4 * 10) gets a file of its own
    # and rewrites nothing; later appends fill that small file until it holds more than
    # four times what a batch appends, then start the next one.
    path = str(tmp_path / "t")
    sink = _thousand(path)
    written = []
    for batch in range(2, 12):
        start = 1000 + (batch - 2) * 10
        result = _commit(sink, batch, _zset((_rows(np.arange(start, start + 10)), 1)), batch - 2)
        removed, _added = data_actions(path, result.version)
        written.append((len(removed), result.rows_written))
    assert written[0] == (0, 10)  # a file of its own
    assert all(rows <= 50 for _, rows in written)  # never a whole 100-row file again
    sizes = sorted(t.num_rows for t in _files(path))
    assert sum(sizes) == 1100
    assert sizes == [50, 50] + [100] * 10
    assert bag(read_version(path)) == bag(_rows(np.arange(1100)))


def test_small_files_at_the_end_merge_so_a_growing_table_keeps_few_files(tmp_path) -> None:
    # Appends of 6 rows give files of 30 (filled until they hold more than 4 x 6); once
    # four of them end the table, the next append rewrites them with it into full files.
    path = str(tmp_path / "t")
    sink = _sink(path)
    _commit(sink, 1, Replace(_rows(np.arange(100))), None)
    written = appended = 0
    merged = []
    for batch in range(2, 102):
        start = 100 + (batch - 2) * 6
        keys = np.arange(start, start + 6)
        result = _commit(sink, batch, _zset((_rows(keys), 1)), batch - 2)
        removed, _added = data_actions(path, result.version)
        if len(removed) > 1:
            merged.append(len(removed))
        written += result.rows_written
        appended += len(keys)
        sizes = [t.num_rows for t in _files(path)]
        assert sum(1 for n in sizes if n < 50) <= 4, f"batch {batch}: files of {sorted(sizes)}"
        if batch % 25 == 0:
            assert bag(read_version(path)) == bag(_rows(np.arange(start + 6)))
    assert merged and set(merged) == {4}  # four small files at a time
    assert sum(t.num_rows for t in _files(path)) == 700
    assert sorted(t.num_rows for t in _files(path)).count(100) >= 6  # full files again
    assert written <= 6 * appended  # each row rewritten a few times, not once per batch


def test_a_table_ending_in_many_small_files_merges_two_files_worth_at_a_time(
    tmp_path, monkeypatch
) -> None:
    # Written before merging existed: the table ends in 20 files of 30 rows.
    path = str(tmp_path / "t")
    sink = _sink(path)
    _commit(sink, 1, Replace(_rows(np.arange(100))), None)
    monkeypatch.setattr(layout, "MERGE_FILES", 10**6)
    for batch in range(2, 102):
        start = 100 + (batch - 2) * 6
        _commit(sink, batch, _zset((_rows(np.arange(start, start + 6)), 1)), batch - 2)
    assert sorted(t.num_rows for t in _files(path)) == [30] * 20 + [100]
    monkeypatch.undo()

    result = _commit(sink, 102, _zset((_rows(np.arange(700, 706)), 1)), 100)

    removed, _added = data_actions(path, result.version)
    assert len(removed) == 6  # 180 rows: the most under two files' worth (200)
    assert result.rows_written == 186
    assert sorted(t.num_rows for t in _files(path)) == [30] * 14 + [86, 100, 100]
    assert bag(read_version(path)) == bag(_rows(np.arange(706)))


def _files(path: str) -> list[pa.Table]:
    table = DeltaTable(path)
    return [pq.read_table(u) for u in table.file_uris()]


def test_a_file_that_outgrows_the_target_is_split_evenly_between_keys(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    dense = pa.table(
        {"k": pa.array([250] * 30 + [260] * 30, pa.int64()), "v": [f"d{i}" for i in range(60)]}
    )

    _commit(sink, 2, _zset((dense, 1)), 0)

    removed, added = data_actions(path, 1)
    assert (len(removed), len(added)) == (1, 2)
    new = [t for t in _files(path) if 200 <= t["k"][0].as_py() < 300]
    # 160 rows: 200-249, 250 x 31, 251-259, 260 x 31, 261-299; the even cut (80) falls in
    # the run of 250, which ends at 81
    assert sorted(t.num_rows for t in new) == [79, 81]
    assert all(t["k"].to_pylist() == sorted(t["k"].to_pylist()) for t in new)
    highs = sorted((t["k"][0].as_py(), t["k"][-1].as_py()) for t in new)
    assert highs[0][1] < highs[1][0]


def test_one_key_with_more_rows_than_a_file_holds_is_split_and_still_found(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _sink(path, target=10)
    many = pa.table({"k": pa.array([7] * 25, pa.int64()), "v": [f"r{i}" for i in range(25)]})
    _commit(sink, 1, Replace(pa.concat_tables([_rows([1, 2, 3]), many, _rows([9])])), None)
    assert max(t.num_rows for t in _files(path)) == 10

    result = _commit(sink, 2, _zset((many.slice(12, 3), -1), (_rows([7], "z"), 1)), 0)

    assert result.files_removed >= 3  # every file holding key 7
    expected = pa.concat_tables(
        [_rows([1, 2, 3]), many.slice(0, 12), many.slice(15), _rows([9]), _rows([7], "z")]
    )
    assert bag(read_version(path)) == bag(expected)
    assert max(t.num_rows for t in _files(path)) <= 10


def test_a_replayed_batch_is_skipped_and_leaves_no_stray_files(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    change = _zset((_rows([10]), -1))
    first = _commit(sink, 2, change, 0)

    again = _commit(sink, 2, change, 0)  # the job crashed before it recorded version 1
    older = _commit(sink, 1, Replace(_rows([1])), 0)
    fresh = _commit(_sink(path), 2, change, None)  # a restarted job: a new handle

    assert again == older == fresh == CommitResult(first.version, skipped=True)
    assert DeltaTable(path).version() == 1
    assert files_on_disk(path) == files_in_log(path)


def test_a_replay_racing_its_own_commit_is_skipped_and_deletes_its_files(
    tmp_path, monkeypatch
) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    change = _zset((_rows([10]), -1))
    _interfere(monkeypatch, sink, lambda: _commit(_sink(path), 2, change, 0))

    result = _commit(sink, 2, change, 0)

    assert result == CommitResult(1, skipped=True)
    assert files_on_disk(path) == files_in_log(path)


def test_another_writer_racing_the_commit_is_a_conflict_and_nothing_stays(
    tmp_path, monkeypatch
) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    other = TableSink(path, SCHEMA, layout=["k"], app_id="someone-else", metadata={})
    _interfere(monkeypatch, sink, lambda: _commit(other, 7, NoChange(), None))

    with pytest.raises(CommitConflictError, match=r"moved from version 0 to 1"):
        _commit(sink, 2, _zset((_rows([10]), -1)), 0)

    assert DeltaTable(path).version() == 1
    assert DeltaTable(path).transaction_version(APP) == 1
    assert files_on_disk(path) == files_in_log(path)


def test_a_table_created_meanwhile_is_a_conflict(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "t")
    sink = _sink(path)
    other = TableSink(path, SCHEMA, layout=["k"], app_id="someone-else", metadata={})
    _interfere(monkeypatch, sink, lambda: _commit(other, 1, Replace(_rows([1])), None))

    with pytest.raises(CommitConflictError, match="created by another writer"):
        _commit(sink, 1, Replace(_rows([1, 2])), None)

    assert DeltaTable(path).version() == 0
    assert files_on_disk(path) == files_in_log(path)


@pytest.mark.parametrize("create", [True, False], ids=["create", "append"])
def test_an_error_after_the_commit_landed_keeps_its_files(tmp_path, monkeypatch, create) -> None:
    """delta-rs may report a failure after the commit's log entry was written (its
    post-commit work): the files that version names stay, and the replay is skipped."""
    from deltalake.exceptions import DeltaError

    from deltamv.delta import sink as sink_module

    path = str(tmp_path / "t")
    sink = _sink(path) if create else _thousand(path)
    if create:
        real_create = sink_module.create_table_with_add_actions

        def create_then_fail(*args, **kwargs):  # type: ignore[no-untyped-def]
            real_create(*args, **kwargs)
            raise DeltaError("I/O error after the commit (injected)")

        monkeypatch.setattr(sink_module, "create_table_with_add_actions", create_then_fail)
        change: Replace | Delta = Replace(_rows([1, 2, 3]))
    else:
        real_commit = DeltaTable.create_write_transaction

        def commit_then_fail(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            real_commit(self, *args, **kwargs)
            raise OSError(28, "No space left on device (injected)")

        monkeypatch.setattr(DeltaTable, "create_write_transaction", commit_then_fail)
        change = _zset((_rows([10]), -1), (_rows([10], "w"), 1))
    batch = 1 if create else 2
    try:
        _commit(sink, batch, change, None if create else 0)
    except StorageError:
        assert not create
    monkeypatch.undo()

    assert _commit(_sink(path), batch, change, None) == CommitResult(
        0 if create else 1, skipped=True
    )
    assert files_in_log(path) <= files_on_disk(path)
    rows = read_arrow(path).sort_by("k")
    assert rows.num_rows == (3 if create else 1000)
    if not create:
        assert rows.slice(10, 1).to_pylist() == [{"k": 10, "v": "w10"}]


def test_commits_leave_log_checkpoints_to_the_housekeeping(tmp_path) -> None:
    """delta-rs checkpoints every 100 versions inside the commit's call unless told not
    to; the job's `checkpoint_interval` decides instead (0: never)."""
    path = str(tmp_path / "t")
    sink = _sink(path)
    for batch in range(1, 103):
        _commit(sink, batch, NoChange(), None if batch == 1 else batch - 2)
    assert DeltaTable(path).version() == 101
    assert not [n for n in os.listdir(os.path.join(path, "_delta_log")) if "checkpoint" in n]


def _interfere(monkeypatch, sink: TableSink, act) -> None:  # type: ignore[no-untyped-def]
    """Run ``act`` once, after ``sink`` has written its files and before it commits."""
    original = sink._write
    done = []

    def write(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = original(*args, **kwargs)
        if not done:
            done.append(True)
            act()
        return result

    monkeypatch.setattr(sink, "_write", write)


def test_a_foreign_commit_is_a_conflict_naming_table_and_versions(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    write_deltalake(path, _rows([5000]), mode="append")

    with pytest.raises(CommitConflictError, match=r"t is at version 1 but job orders last"):
        _commit(sink, 2, _zset((_rows([10]), -1)), 0)

    assert DeltaTable(path).version() == 1
    assert files_on_disk(path) == files_in_log(path)


def test_a_table_deleted_under_the_job_is_a_conflict(tmp_path) -> None:
    with pytest.raises(CommitConflictError, match="does not exist but job orders last"):
        _commit(_sink(str(tmp_path / "t")), 3, NoChange(), 2)


@pytest.mark.parametrize(
    "change",
    [
        _zset((_rows([10], "other"), -1)),  # the key is there, the row is not
        _zset((_rows([5000]), -1)),  # beyond every file's range
        _zset((_rows([10]), -2)),  # one copy held, two removed
        _zset((_rows([1, 2]), 1), (_rows([10], "other"), -1)),  # with other work before it
    ],
)
def test_removing_a_row_the_table_does_not_hold_commits_nothing(tmp_path, change) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)

    with pytest.raises(StateError, match=r"does not hold a row the job removes \(\{\"k\": "):
        _commit(sink, 2, change, 0)

    assert DeltaTable(path).version() == 0
    assert files_on_disk(path) == files_in_log(path)
    assert sink.handle.version() == 0


def test_removing_from_a_table_not_yet_created_is_a_state_error(tmp_path) -> None:
    path = str(tmp_path / "t")
    with pytest.raises(StateError, match="does not hold a row"):
        _commit(_sink(path), 1, _zset((_rows([1]), -1)), None)
    assert not os.path.exists(os.path.join(path, "_delta_log"))


def test_a_replace_removes_every_file_and_adds_the_new_contents(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)

    result = _commit(sink, 2, Replace(_rows(np.arange(50, 120))), 0)

    removed, added = data_actions(path, 1)
    assert (len(removed), len(added)) == (10, 1)
    assert (result.files_removed, result.files_added, result.rows_written) == (10, 1, 70)
    assert read_arrow(path).sort_by("k") == _rows(np.arange(50, 120))


def test_a_replace_from_batches_equals_one_from_a_table(tmp_path) -> None:
    rows = _rows(np.random.default_rng(2).permutation(5000))
    _commit(_sink(str(tmp_path / "a"), target=700), 1, Replace(rows), None)
    _commit(
        _sink(str(tmp_path / "b"), target=700),
        1,
        Replace(iter(rows.to_batches(max_chunksize=333))),
        None,
    )

    def layout(path: str) -> list[tuple[int, int, int]]:
        return sorted((t["k"][0].as_py(), t["k"][-1].as_py(), t.num_rows) for t in _files(path))

    assert layout(str(tmp_path / "a")) == layout(str(tmp_path / "b"))
    assert read_arrow(str(tmp_path / "b")).sort_by("k") == rows.sort_by("k")


def test_no_change_is_a_version_without_data_actions(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)

    result = _commit(sink, 2, NoChange(), 0)

    assert result == CommitResult(1, skipped=False)
    kinds = sorted(next(iter(a)) for a in log(path, 1))
    assert kinds == ["commitInfo", "txn"]
    assert versions(path)[-1].watermark == 20


def test_a_change_that_cancels_out_is_a_version_without_data_actions(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)

    change = _zset((_rows([3, 4000]), 1), (_rows([3, 4000]), -1), (_rows([3, 4000]), 0))
    result = _commit(sink, 2, change, 0)

    assert result == CommitResult(1, skipped=False)
    assert sorted(next(iter(a)) for a in log(path, 1)) == ["commitInfo", "txn"]


def test_no_change_on_a_missing_table_creates_it_empty(tmp_path) -> None:
    path = str(tmp_path / "t")
    result = _commit(_sink(path), 1, NoChange(), None)
    assert result == CommitResult(0, skipped=False)
    assert read_arrow(path) == SCHEMA.empty_table()


def test_a_delta_on_a_missing_table_creates_it(tmp_path) -> None:
    path = str(tmp_path / "t")
    result = _commit(_sink(path, target=4), 1, _zset((_rows([3, 1, 2, 2]), 1)), None)
    assert (result.version, result.files_added) == (0, 1)
    assert bag(read_arrow(path)) == bag(_rows([1, 2, 2, 3]))


def test_a_table_with_other_columns_is_refused_naming_both(tmp_path) -> None:
    path = str(tmp_path / "t")
    _thousand(path)
    other = pa.schema([("k", pa.int64()), ("v", pa.string()), ("x", pa.int32())])
    sink = TableSink(path, other, layout=["k"], app_id=APP, metadata={})

    with pytest.raises(CommitConflictError) as e:
        _commit(sink, 2, NoChange(), 0)

    assert "has columns (k long, v string)" in str(e.value)
    assert "this job writes (k long, v string, x integer)" in str(e.value)
    assert DeltaTable(path).version() == 0


def test_a_partitioned_table_is_refused(tmp_path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, _rows([1, 2]), partition_by=["v"])
    with pytest.raises(CommitConflictError, match="partitioned by"):
        _commit(_sink(path), 1, NoChange(), None)


def test_every_commit_carries_watermark_batch_job_and_user_metadata(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    sink.commit(
        2,
        _zset((_rows([1]), -1)),
        metadata={"deltamv.watermark": "123", "deltamv.checkpoint": "/ck", "other": "x"},
        expected_version=0,
    )

    latest = DeltaTable(path).history(limit=1)[0]
    assert latest["deltamv.watermark"] == "123"
    assert latest["deltamv.job"] == "orders"
    assert latest["deltamv.batch"] == "2"
    assert latest["other"] == "x"
    assert json.loads(latest["userMetadata"]) == {
        "deltamv.batch": "2",
        "deltamv.checkpoint": "/ck",
        "deltamv.job": "orders",
        "deltamv.watermark": "123",
    }
    assert latest["userMetadata"] == (
        '{"deltamv.batch":"2","deltamv.checkpoint":"/ck","deltamv.job":"orders",'
        '"deltamv.watermark":"123"}'
    )
    assert {"txn": {"appId": APP, "version": 2}} in log(path, 1)
    info = versions(path)[-1]
    assert (info.watermark, info.job, info.batch_id) == (123, "orders", 2)


def test_a_not_null_column_refuses_nulls(tmp_path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
    sink = _sink(str(tmp_path / "t"), schema=schema)
    rows = pa.table({"k": [1, None], "v": ["a", "b"], "__w": [1, 1]})
    with pytest.raises(DeltaMVError, match="NOT NULL"):
        _commit(sink, 1, Delta(rows), None)


def test_the_weight_column_must_be_an_integer_without_nulls(tmp_path) -> None:
    sink = _sink(str(tmp_path / "t"))
    with pytest.raises(DeltaMVError, match="weight column"):
        _commit(sink, 1, Delta(_rows([1])), None)
    with pytest.raises(DeltaMVError, match="NULLs"):
        _commit(sink, 1, Delta(_rows([1]).append_column("__w", pa.array([None], pa.int64()))), None)


@pytest.mark.parametrize("stream", [False, True])
def test_a_table_written_by_another_engine_is_changed_correctly(tmp_path, stream: bool) -> None:
    """Files in no key order (overlapping ranges): removals look in every candidate."""
    path = str(tmp_path / "t")
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 100, 600)
    for part in range(6):
        write_deltalake(path, _rows(keys[part * 100 : (part + 1) * 100]), mode="append")
    sink = _sink(path, target=150)
    if stream:
        sink.layout.in_memory_rows = 0
    gone = _rows(keys[[5, 150, 399, 599]])

    _commit(sink, 1, _zset((gone, -1), (_rows([50, 1000]), 1)), None)

    expected = bag(_rows(keys)) - bag(gone) + bag(_rows([50, 1000]))
    assert bag(read_version(path)) == expected
    assert max(t.num_rows for t in _files(path)) <= 150
    with pytest.raises(StateError, match="1 more copies removed than held"):
        _commit(sink, 2, _zset((_rows([50], "nope"), -1)), 6)
    assert DeltaTable(path).version() == 6
    assert files_on_disk(path) - files_in_log(path) == set()


def test_the_handle_opens_the_log_once_per_run(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "t")
    opened = []
    real = table_module.DeltaTable

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(table_module, "DeltaTable", counting)
    sink = _sink(path)
    _commit(sink, 1, Replace(_rows(np.arange(1000))), None)  # 1: no table yet; 2: created
    for batch in range(2, 8):
        result = _commit(sink, batch, _zset((_rows([batch * 100]), -1)), batch - 2)
        assert sink.handle.version() == result.version  # refreshed after its own commit

    assert len(opened) == 2


def test_every_version_reads_the_same_through_delta_rs_and_polars(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    expected = {0: bag(_rows(np.arange(1000)))}
    changes = [
        _zset((_rows([1, 2, 3]), -1), (_rows([2], "b"), 2)),
        NoChange(),
        _zset((_rows(np.arange(2000, 2150)), 1)),
        Replace(_rows([7, 7, 8])),
        _zset((_rows([7]), -1)),
    ]
    current = expected[0]
    for version, change in enumerate(changes, start=1):
        result = _commit(sink, version + 1, change, version - 1)
        if isinstance(change, Delta):
            rows = change.rows
            for w in set(rows["__w"].to_pylist()):
                part = rows.filter(pc.equal(rows["__w"], w)).drop_columns(["__w"])
                for _ in range(abs(w)):
                    current = current + bag(part) if w > 0 else current - bag(part)
        elif isinstance(change, Replace):
            current = bag(change.data)  # type: ignore[arg-type]
        expected[result.version] = current

    for version, rows in expected.items():
        assert bag(read_version(path, version)) == rows
        assert bag(pl.read_delta(path, version=version).to_arrow()) == rows


def test_rows_with_nested_columns_are_matched_whole(tmp_path) -> None:
    schema = pa.schema([("k", pa.int64()), ("tags", pa.list_(pa.string()))])
    path = str(tmp_path / "t")
    sink = TableSink(path, schema, layout=["k"], app_id=APP, metadata={}, target_file_rows=2)
    rows = pa.table({"k": [1, 1, 2, 3], "tags": [["a"], ["a", "b"], None, []]}, schema=schema)
    sink.commit(1, Replace(rows), metadata={}, expected_version=None)

    gone = pa.table({"k": [1, 3], "tags": [["a", "b"], []], "__w": [-1, -1]}, schema=None)
    sink.commit(
        2,
        Delta(gone.cast(schema.append(pa.field("__w", pa.int64())))),
        metadata={},
        expected_version=0,
    )

    assert bag(read_version(path)) == bag(rows.take([0, 2]))
    with pytest.raises(StateError):
        absent = pa.table({"k": [1], "tags": [["b"]], "__w": [-1]})
        sink.commit(3, Delta(absent), metadata={}, expected_version=1)


def test_a_data_file_gone_from_storage_is_a_storage_error_and_nothing_is_committed(
    tmp_path,
) -> None:
    path = str(tmp_path / "t")
    sink = _thousand(path)
    victim = next(
        a["add"]["path"]
        for a in log(path, 0)
        if "add" in a and json.loads(a["add"]["stats"])["minValues"]["k"] == 900
    )  # the file holding 950: rewritten after the one holding 150
    os.remove(os.path.join(path, victim))

    with pytest.raises(StorageError) as e:
        _commit(sink, 2, _zset((_rows([150]), -1), (_rows([950]), -1)), 0)

    assert "\n" not in str(e.value)
    assert path in str(e.value)
    assert DeltaTable(path).version() == 0
    assert files_on_disk(path) == files_in_log(path) - {victim}


def test_a_replace_takes_a_record_batch_or_a_reader(tmp_path) -> None:
    rows = _rows([3, 1, 2])
    for name, data in [
        ("batch", rows.to_batches()[0]),
        ("reader", pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches())),
    ]:
        path = str(tmp_path / name)
        _commit(_sink(path), 1, Replace(data), None)
        assert read_arrow(path) == _rows([1, 2, 3])


def test_a_damaged_data_file_is_a_storage_error(tmp_path) -> None:
    path = str(tmp_path / "t")
    _thousand(path)
    victim = next(a["add"]["path"] for a in log(path, 0) if "add" in a)
    with open(os.path.join(path, victim), "r+b") as f:
        f.truncate(100)

    with pytest.raises(StorageError, match=f"data file {victim} is unreadable"):
        _commit(_sink(path), 2, _zset((_rows(np.arange(0, 1000, 50)), -1)), 0)
    assert DeltaTable(path).version() == 0


def test_a_failure_inside_replaced_batches_comes_out_as_itself(tmp_path) -> None:
    def batches():  # type: ignore[no-untyped-def]
        yield _rows([1, 2]).to_batches()[0]
        raise KeyError("the source broke")

    path = str(tmp_path / "t")
    with pytest.raises(KeyError, match="the source broke"):
        _commit(_sink(path), 1, Replace(batches()), None)
    assert not os.path.exists(path) or files_on_disk(path) == set()
