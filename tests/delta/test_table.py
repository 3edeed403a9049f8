from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltamv.delta import DeltaTableHandle, NoChange, TableSink
from deltamv.errors import DeltaMVError


def _rows(*keys: int) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64())})


def test_a_handle_on_a_missing_table_answers_without_creating_anything(tmp_path) -> None:
    path = str(tmp_path / "t")
    handle = DeltaTableHandle(path)

    assert not handle.exists()
    assert handle.version() is None
    assert handle.files() == ()
    assert handle.transaction_version("a") is None
    assert handle.commits_since(0) == []
    with pytest.raises(DeltaMVError, match="there is no Delta table"):
        handle.arrow_schema()
    assert not os.path.exists(path)


def test_a_handle_sees_a_table_created_after_it_looked(tmp_path) -> None:
    path = str(tmp_path / "t")
    handle = DeltaTableHandle(path)
    assert not handle.exists()
    write_deltalake(path, _rows(1, 2))

    assert not handle.exists()  # answers hold until a refresh
    handle.refresh()

    assert (handle.exists(), handle.version()) == (True, 0)
    assert handle.arrow_schema() == pa.schema([("k", pa.int64())])


def test_refresh_follows_new_versions_and_their_files(tmp_path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(1, 2))
    handle = DeltaTableHandle(path)
    assert [f.num_records for f in handle.files()] == [2]

    write_deltalake(path, _rows(3), mode="append")
    write_deltalake(path, _rows(4, 5, 6), mode="append")
    assert handle.version() == 0
    handle.refresh()

    assert handle.version() == 2
    assert sorted(f.num_records for f in handle.files()) == [1, 2, 3]  # type: ignore[type-var]
    assert all(f.size > 0 for f in handle.files())
    assert [c["version"] for c in handle.commits_since(0)] == [1, 2]
    assert handle.commits_since(2) == []
    assert handle.add_actions().num_rows == 3


def test_commits_since_names_each_version_by_its_own_commit(tmp_path) -> None:
    """A commit landing after the handle read its version neither shows nor shifts the
    commit infos it gives (delta-rs' history() gave each version the next one's)."""
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(0))
    for n in (1, 2, 3):
        write_deltalake(path, _rows(n), mode="append", commit_properties=_note(n))
    handle = DeltaTableHandle(path)
    assert handle.version() == 3
    write_deltalake(path, _rows(4), mode="append", commit_properties=_note(4))

    found = [(c["version"], c.get("note")) for c in handle.commits_since(1)]
    assert found == [(2, "2"), (3, "3")]


def _note(n: int):  # type: ignore[no-untyped-def]
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"note": str(n)})


def test_the_handle_knows_the_app_transactions_after_its_own_commits(tmp_path) -> None:
    path = str(tmp_path / "t")
    sink = TableSink(path, pa.schema([("k", pa.int64())]), layout=["k"], app_id="job", metadata={})
    handle = sink.handle
    for batch in range(1, 4):
        sink.commit(batch, NoChange(), metadata={}, expected_version=handle.version())
        assert handle.transaction_version("job") == batch
    assert handle.version() == 2
    assert handle.transaction_version("other") is None


def test_reload_drops_answers_but_keeps_what_it_learned_of_files(tmp_path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(1))
    handle = DeltaTableHandle(path)
    cache = handle.file_cache("fact")
    cache.put("f", 1)
    handle.files()
    write_deltalake(path, _rows(2), mode="append")

    handle.reload()

    assert handle.version() == 1
    assert len(handle.files()) == 2
    assert cache.get("f") == 1
    cache.retain({"g"})
    assert cache.get("f") is None


def test_file_locations_are_decoded_from_the_log(tmp_path) -> None:
    handle = DeltaTableHandle(str(tmp_path / "t"))
    _, location = handle.file_location("part%20one.parquet")
    assert location.endswith("/t/part one.parquet")


def test_delta_rs_messages_become_one_plain_line() -> None:
    """delta-rs colours its messages even when not on a terminal, and some carry a
    backtrace: the one line keeps neither."""
    from deltamv.delta._table import _line

    coloured = "LocalFileSystem error \x1b[31m↳\x1b[0m No space left on device (os error 28)"
    assert (
        _line(Exception(coloured))
        == "LocalFileSystem error ↳ No space left on device (os error 28)"
    )
    traced = "Json error: Truncated record\n   0: <unknown>\n   1: <unknown>\n  12: start_thread"
    assert _line(Exception(traced)) == "Json error: Truncated record"
