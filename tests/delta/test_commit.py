"""What a table says about the commits on it: its version, a job's last batch, its owner.

The commits themselves (atomic, idempotent, never over another writer) are the table
sink's; see test_sink.py.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltamv.delta import Replace, TableSink, committed_batch, owner_of, table_version, write_arrow
from deltamv.delta.commit import BATCH_KEY, JOB_KEY, WATERMARK_KEY
from deltamv.errors import StorageError

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
JOB = "orders_by_day"
APP = f"deltamv:{JOB}"


def _rows(*keys: int) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)


def _sink(path: str) -> TableSink:
    return TableSink(path, SCHEMA, layout=["k"], app_id=APP, metadata={JOB_KEY: JOB})


def _commit(sink: TableSink, batch: int, *keys: int, expected: int | None) -> int:
    result = sink.commit(
        batch, Replace(_rows(*keys)), metadata={WATERMARK_KEY: str(batch * 100)},
        expected_version=expected,
    )  # fmt: skip
    return result.version


def test_version_and_batch_follow_the_commits(tmp_path) -> None:
    path = str(tmp_path / "t")
    assert table_version(path) is None
    assert committed_batch(path, APP) is None

    sink = _sink(path)
    _commit(sink, 1, 1, 2, expected=None)
    assert (table_version(path), committed_batch(path, APP)) == (0, 1)
    _commit(sink, 5, 3, expected=0)
    assert (table_version(path), committed_batch(path, APP)) == (1, 5)
    assert committed_batch(path, "deltamv:another") is None


def test_every_commit_names_job_watermark_and_batch(tmp_path) -> None:
    path = str(tmp_path / "t")
    _commit(_sink(path), 3, 1, expected=None)
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as f:
        actions = [json.loads(line) for line in f]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert (info[JOB_KEY], info[WATERMARK_KEY], info[BATCH_KEY]) == (JOB, "300", "3")
    assert {"txn": {"appId": APP, "version": 3}} in actions


def test_owner_is_the_job_that_created_the_table(tmp_path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _commit(_sink(ours), 1, 1, expected=None)
    write_deltalake(theirs, _rows(1))

    assert owner_of(ours) == JOB
    assert owner_of(theirs) is None
    assert owner_of(str(tmp_path / "nothing")) is None


def test_storage_failures_are_storage_errors_with_one_line(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = str(blocker / "t")
    with pytest.raises(StorageError) as raised:
        _commit(_sink(path), 1, 1, expected=None)
    assert "\n" not in str(raised.value)
    assert path in str(raised.value)
    with pytest.raises(StorageError, match="writing data files"):
        write_arrow(_rows(1), path, schema=SCHEMA, prefix="x")
