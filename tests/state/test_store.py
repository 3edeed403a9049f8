"""The job's state file: its layout version, its transactions, its read-only opening."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from deltamv.errors import StateError
from deltamv.state import STATE_FILE, StateStore, open_read_only
from deltamv.state import store as store_module

ROWS = pa.table({"region": [1, 1], "start_ts": [10, 10], "id": [1, 2]})


def open_store(checkpoint: Path, *, job: str = "j", start_ts: int = 0) -> StateStore:
    return StateStore(checkpoint / STATE_FILE, job=job, start_ts=start_ts)


def ingest(store: StateStore, batch: int, watermark: int) -> None:
    store.begin_batch(batch, watermark=watermark, events=3, released=1, started_ms=1_000,
                      blocker=None, offsets={"regions": {"1": batch}})  # fmt: skip


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "_checkpoint"


def test_a_new_state_starts_before_the_first_batch_at_the_start_ts(checkpoint: Path) -> None:
    store = open_store(checkpoint, start_ts=500)
    progress = store.progress()
    assert (progress.batch, progress.watermark, progress.applied_batch) == (-1, 500, -1)
    assert progress.committed_watermark is None
    assert not progress.bootstrapped
    assert (store.job, store.start_ts) == ("j", 500)


def test_a_batch_and_its_finish_are_remembered_across_openings(checkpoint: Path) -> None:
    store = open_store(checkpoint)
    with store.transaction():
        ingest(store, 0, 120)
    store.finish_batch(0, committed_watermark=120, duration_ms=7, report={"rows": 3})
    store.close()

    again = open_store(checkpoint)
    progress = again.progress()
    assert (progress.batch, progress.watermark, progress.applied_batch) == (0, 120, 0)
    assert progress.committed_watermark == 120
    record = again.last_batch()
    assert record is not None
    assert (record.batch, record.events, record.duration_ms, record.report) == (
        0,
        3,
        7,
        {"rows": 3},
    )
    assert again.batch_offsets(0) == {"regions": {"1": 0}}


def test_a_transaction_that_fails_leaves_nothing_behind(checkpoint: Path) -> None:
    store = open_store(checkpoint)
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        ingest(store, 0, 120)
        store.pending.add("t", ROWS)
        store.buffer.add("t", ROWS.append_column("commit_ts", pa.array([11, 11])))
        store.outbox.put(0, "view:v", "delta", [ROWS])
        raise RuntimeError("boom")
    assert store.progress().batch == -1
    assert store.batch_count() == 0
    assert store.pending.count() == 0
    assert store.buffer.count() == 0
    assert store.outbox.batches() == []


def test_a_checkpoint_of_another_job_or_start_is_refused(checkpoint: Path) -> None:
    open_store(checkpoint, job="a", start_ts=5).close()
    with pytest.raises(StateError, match="belongs to job 'a', not 'b'"):
        open_store(checkpoint, job="b", start_ts=5)
    with pytest.raises(StateError, match="was started at ts 5") as raised:
        open_store(checkpoint, job="a", start_ts=6)
    assert "new checkpoint" in str(raised.value)


def test_a_state_of_another_layout_version_is_refused_in_one_line(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:  # a deltamv with a newer layout wrote it
        patched.setattr(store_module, "SCHEMA_VERSION", store_module.SCHEMA_VERSION + 1)
        open_store(checkpoint).close()
    for opening in (lambda: open_store(checkpoint), lambda: open_read_only(checkpoint)):
        with pytest.raises(StateError) as raised:
            opening()
        message = str(raised.value)
        assert "\n" not in message
        assert str(checkpoint / STATE_FILE) in message
        assert f"layout version {store_module.SCHEMA_VERSION + 1}" in message
        assert f"reads version {store_module.SCHEMA_VERSION}" in message
        assert "new checkpoint" in message


def test_a_state_of_the_first_layout_is_refused(checkpoint: Path) -> None:
    checkpoint.mkdir()
    with sqlite3.connect(checkpoint / STATE_FILE) as db:  # what the first layout wrote
        db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('job', 'j')")
    with pytest.raises(StateError, match="has layout version 1"):
        open_store(checkpoint)


def test_read_only_opening_reads_while_the_job_writes(checkpoint: Path) -> None:
    assert open_read_only(checkpoint) is None  # no state yet: nothing is created
    assert not checkpoint.exists()
    store = open_store(checkpoint)
    with store.transaction():
        ingest(store, 0, 120)
    with store.transaction():  # the job is in the middle of its next batch
        ingest(store, 1, 130)
        reader = open_read_only(checkpoint)
        assert reader is not None
        assert reader.progress().batch == 0  # the last committed batch, without blocking
        assert [b.batch for b in reader.batches()] == [0]
    assert reader.progress().batch == 1
    assert reader.job == "j"
    reader.close()


def test_commits_are_recorded_per_target(checkpoint: Path) -> None:
    store = open_store(checkpoint)
    assert store.committed_version("view:v") is None
    store.record_commit("view:v", 3, 7)
    store.record_commit("table:t", 0, 7)
    store.record_commit("view:v", 4, 8)
    assert (store.committed_version("view:v"), store.committed_batch("view:v")) == (4, 8)
    assert store.committed_targets() == {"view:v": (4, 8), "table:t": (0, 7)}


def test_the_checkpoint_id_is_set_once(checkpoint: Path) -> None:
    store = open_store(checkpoint)
    assert store.checkpoint_id("first") == "first"
    assert store.checkpoint_id("second") == "first"


def wal_frames(path: Path) -> tuple[int, int]:
    """(frames in the log, frames of them copied into the file), without copying any."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_autocheckpoint=0")
        # a PASSIVE checkpoint of nothing new reports where the log stands
        _, log, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(log), int(copied)
    finally:
        db.close()


def blob_rows(store: StateStore, n: int) -> None:
    with store.transaction():
        store.db.execute("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
        store.db.executemany("INSERT INTO filler VALUES (?)", [(b"x" * 4000,)] * n)


def wal_size(checkpoint: Path) -> int:
    return (checkpoint / (STATE_FILE + "-wal")).stat().st_size


def test_commits_are_copied_out_of_the_log_in_the_background(checkpoint: Path) -> None:
    store = open_store(checkpoint)
    blob_rows(store, 500)
    store._checkpointer.wait()
    log, copied = wal_frames(checkpoint / STATE_FILE)
    assert log >= 500 and copied == log  # every committed page is in the file
    store.close()
    store = open_store(checkpoint)
    assert store.db.execute("SELECT COUNT(*) FROM filler").fetchone()[0] == 500
    store.close()


@pytest.mark.parametrize("limit", [1_000_000, None])
def test_a_write_waits_for_the_checkpoint_once_the_log_is_past_its_limit(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    if limit is not None:
        monkeypatch.setattr(store_module, "WAL_LIMIT", limit)
    store = open_store(checkpoint)
    waits = []
    wait = store._checkpointer.wait
    monkeypatch.setattr(store._checkpointer, "wait", lambda: waits.append(1) or wait())
    blob_rows(store, 500)  # about 2 MB of log
    assert waits == []
    store.record_commit("view", 1, 0)  # bookkeeping right after: never waits
    assert waits == []
    blob_rows(store, 1)
    if limit is None:
        assert waits == []
    else:
        assert waits == [1]
        # the checkpoint had copied every page, so that write started the log over
        log, copied = wal_frames(checkpoint / STATE_FILE)
        assert log < 10 and copied <= log
    store.close()


def test_a_state_error_on_a_nearly_full_file_system_says_so(tmp_path, monkeypatch) -> None:
    """SQLite reports a full disk as "disk I/O error" when a file cannot even grow."""
    import os
    from types import SimpleNamespace

    from deltamv.state import store as store_module

    path = tmp_path / "state.db"
    assert store_module._full(path) == ""  # (the test's file system has room)
    monkeypatch.setattr(os, "statvfs", lambda _: SimpleNamespace(f_bavail=10, f_frsize=4096))
    assert store_module._full(path) == " (the file system has 40 KiB free)"
