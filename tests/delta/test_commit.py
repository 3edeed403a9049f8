from __future__ import annotations

import importlib
import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltamv.delta import (
    CommitResult,
    commit,
    committed_batch,
    file_uris,
    owner_of,
    read_arrow,
    table_version,
    versions,
    write_arrow,
)
from deltamv.errors import CommitConflictError, StorageError

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
JOB = "orders_by_day"


def _rows(*keys: int) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)


def _commit_batch(
    path: str,
    batch: int,
    keys: list[int],
    *,
    replace: bool = True,
    expected: int | None = None,
    watermark: int | None = None,
) -> CommitResult:
    files = write_arrow(_rows(*keys), path, schema=SCHEMA, prefix=f"b{batch}")
    return commit(
        path,
        schema=SCHEMA,
        add=files,
        replace=replace,
        app_id=f"deltamv-{JOB}",
        batch_id=batch,
        metadata={
            "deltamv.job": JOB,
            "deltamv.watermark": str(watermark if watermark is not None else batch * 100),
        },
        expected_version=expected,
    )


def _log(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f]


def test_the_first_commit_creates_the_table_as_version_0(tmp_path) -> None:
    path = str(tmp_path / "t")
    assert table_version(path) is None
    assert committed_batch(path, f"deltamv-{JOB}") is None

    result = _commit_batch(path, 1, [1, 2, 3])

    assert (result.version, result.skipped, result.files_added, result.rows_written) == (
        0,
        False,
        1,
        3,
    )
    assert result.bytes_written > 0
    assert table_version(path) == 0
    assert committed_batch(path, f"deltamv-{JOB}") == 1
    assert read_arrow(path).sort_by("k") == _rows(1, 2, 3)
    actions = _log(path, 0)
    assert {"txn": {"appId": f"deltamv-{JOB}", "version": 1}} in actions
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert (info["deltamv.job"], info["deltamv.watermark"], info["deltamv.batch"]) == (
        JOB,
        "100",
        "1",
    )


def test_replace_removes_every_old_file_in_the_same_version(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1, 2, 3])
    _commit_batch(path, 2, [4], replace=False)
    old = {os.path.basename(u) for u in file_uris(path)}
    assert len(old) == 2

    result = _commit_batch(path, 3, [5, 6], expected=1)

    assert (result.version, result.skipped, result.files_added, result.files_removed) == (
        2,
        False,
        1,
        2,
    )
    actions = _log(path, 2)
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    added = {a["add"]["path"] for a in actions if "add" in a}
    assert removed == old
    assert len(added) == 1 and not added & old
    assert {"txn": {"appId": f"deltamv-{JOB}", "version": 3}} in actions
    assert read_arrow(path).sort_by("k") == _rows(5, 6)
    assert DeltaTable(path).get_add_actions(flatten=True).num_rows == 1


def test_a_replayed_batch_is_skipped_and_commits_nothing(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1])
    _commit_batch(path, 2, [2], expected=0)

    again = _commit_batch(path, 2, [2], expected=0)
    older = _commit_batch(path, 1, [1], expected=0)

    assert again == CommitResult(1, skipped=True)
    assert older == CommitResult(1, skipped=True)
    assert table_version(path) == 1
    assert [v.batch_id for v in versions(path)] == [1, 2]
    assert read_arrow(path) == _rows(2)


def test_another_writer_in_between_is_a_conflict(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1])
    write_deltalake(path, _rows(99), mode="append")

    with pytest.raises(CommitConflictError) as raised:
        _commit_batch(path, 2, [2], expected=0)

    message = str(raised.value)
    assert "\n" not in message
    assert f"is at version 1 but job {JOB} last committed version 0" in message
    assert table_version(path) == 1
    assert sorted(read_arrow(path).column("k").to_pylist()) == [1, 99]


def test_a_commit_racing_another_writer_fails_instead_of_retrying(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1])
    stale = DeltaTable(path)
    write_deltalake(path, _rows(99), mode="append")
    # What commit() does after it read the table: commit with no retries.
    from deltalake.transaction import CommitProperties

    with pytest.raises(Exception, match="Failed to commit"):
        stale.create_write_transaction(
            [],
            mode="append",
            schema=SCHEMA,
            commit_properties=CommitProperties(max_commit_retries=0),
        )
    assert table_version(path) == 1


def test_a_table_that_disappeared_is_a_conflict(tmp_path) -> None:
    with pytest.raises(CommitConflictError, match="does not exist but job"):
        _commit_batch(str(tmp_path / "t"), 5, [1], expected=4)


def test_a_different_schema_is_refused(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1])
    other = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.float64())])
    files = write_arrow(
        pa.table({"k": [1], "v": ["a"], "w": [1.0]}), path, schema=other, prefix="x"
    )
    with pytest.raises(CommitConflictError, match=r"has columns \(k long, v string\)"):
        commit(
            path,
            schema=other,
            add=files,
            replace=True,
            app_id="a",
            batch_id=2,
            metadata={},
            expected_version=0,
        )
    assert table_version(path) == 0


def test_an_empty_version_removes_everything(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit_batch(path, 1, [1, 2])

    result = _commit_batch(path, 2, [], expected=0)

    assert result == CommitResult(1, skipped=False, files_removed=1)
    assert file_uris(path) == []
    assert read_arrow(path) == SCHEMA.empty_table()
    assert read_arrow(path, version=0).num_rows == 2


def test_an_empty_first_version_creates_an_empty_table(tmp_path) -> None:
    path = str(tmp_path / "t")
    assert _commit_batch(path, 1, []) == CommitResult(0, skipped=False)
    assert read_arrow(path) == SCHEMA.empty_table()


def test_owner_is_the_job_that_created_the_table(tmp_path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _commit_batch(ours, 1, [1])
    write_deltalake(theirs, _rows(1))

    assert owner_of(ours) == JOB
    assert owner_of(theirs) is None
    assert owner_of(str(tmp_path / "nothing")) is None


def test_a_table_created_by_someone_else_meanwhile_is_a_conflict(tmp_path, monkeypatch) -> None:
    # The package's ``commit`` attribute is the function; fetch the module itself.
    commit_module = importlib.import_module("deltamv.delta.commit")

    path = str(tmp_path / "t")
    write_deltalake(path, _rows(99))
    real_open = commit_module.open_table
    calls = []

    def open_late(table_path: str, version: int | None = None):
        # The first look happens before the other writer's create.
        calls.append(table_path)
        return None if len(calls) == 1 else real_open(table_path, version)

    monkeypatch.setattr(commit_module, "open_table", open_late)
    with pytest.raises(CommitConflictError, match="created by another writer"):
        _commit_batch(path, 1, [1])
    assert table_version(path) == 0


def test_storage_failures_are_storage_errors_with_one_line(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = str(blocker / "t")
    with pytest.raises(StorageError) as raised:
        commit(
            path,
            schema=SCHEMA,
            add=[],
            replace=True,
            app_id="a",
            batch_id=1,
            metadata={},
            expected_version=None,
        )
    assert "\n" not in str(raised.value) and path in str(raised.value)
    with pytest.raises(StorageError, match="writing data files"):
        write_arrow(_rows(1), path, schema=SCHEMA, prefix="x")
