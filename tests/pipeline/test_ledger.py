"""The segment ledger: a segment deleted or rewritten after the job read it stops the job."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from deltamv.errors import BadRecordError
from deltamv.pipeline.ledger import SegmentLedger, digest_file
from deltamv.state import STATE_FILE, StateStore
from deltamv.state.store import SegmentRecord


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "_checkpoint" / STATE_FILE, job="j", start_ts=0)


def publish(folder: Path, seq: int, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{seq:06d}.jsonl"
    path.write_text(text)
    return path


def fingerprint(path: Path, seq: int) -> SegmentRecord:
    """What the job's reader records of a segment it parsed."""
    st = os.stat(path)
    digest = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    return SegmentRecord(str(path), 1, seq, st.st_size, st.st_mtime_ns, digest)


def read_batch(store: StateStore, ledger: SegmentLedger, batch: int, *paths: Path) -> None:
    """Record ``paths`` as read by ``batch``, in the batch's transaction, as the job does."""
    records = [fingerprint(p, int(p.stem)) for p in paths]
    with store.transaction():
        ledger.record(batch, records)
        store.begin_batch(batch, watermark=0, events=0, released=0, started_ms=0, blocker=None,
                          offsets=None)  # fmt: skip


def test_digest_file_is_the_digest_of_the_bytes(tmp_path: Path) -> None:
    path = publish(tmp_path, 1, "x" * 3_000_000)  # more than one read chunk
    assert digest_file(str(path)) == fingerprint(path, 1).digest


def test_unchanged_segments_pass(tmp_path: Path, store: StateStore) -> None:
    ledger = SegmentLedger(store)
    a, b = publish(tmp_path, 1, "a\n"), publish(tmp_path, 2, "b\n")
    read_batch(store, ledger, 0, a)
    read_batch(store, ledger, 1, b)
    assert ledger.verify_all() == 2


def test_a_deleted_segment_stops_the_job_naming_it(tmp_path: Path, store: StateStore) -> None:
    ledger = SegmentLedger(store)
    a = publish(tmp_path, 1, "a\n")
    read_batch(store, ledger, 0, a)
    a.unlink()
    with pytest.raises(BadRecordError, match="deleted after the job read it") as raised:
        ledger.verify_all()
    assert raised.value.file == str(a)
    assert "restore it" in str(raised.value)


@pytest.mark.parametrize(("new_text", "reason"), [
    ("longer\n", "bytes then"),  # another size
    ("b\n", "same size, other content"),
])  # fmt: skip
def test_a_rewritten_segment_stops_the_job(
    tmp_path: Path, store: StateStore, new_text: str, reason: str
) -> None:
    ledger = SegmentLedger(store)
    a = publish(tmp_path, 1, "a\n")
    read_batch(store, ledger, 0, a)
    a.write_text(new_text)
    os.utime(a, ns=(0, os.stat(a).st_mtime_ns + 1_000_000))
    with pytest.raises(BadRecordError, match=reason):
        ledger.verify_all()


def test_a_restored_identical_copy_passes(tmp_path: Path, store: StateStore) -> None:
    ledger = SegmentLedger(store)
    a = publish(tmp_path, 1, "a\n")
    read_batch(store, ledger, 0, a)
    a.unlink()
    publish(tmp_path, 1, "a\n")
    os.utime(a, ns=(0, os.stat(a).st_mtime_ns + 1_000_000))
    assert ledger.verify_all() == 1
    assert ledger.verify_all() == 1


def test_a_replayed_batch_must_read_what_the_first_reading_read(
    tmp_path: Path, store: StateStore
) -> None:
    ledger = SegmentLedger(store)
    a = publish(tmp_path, 1, "a\n")
    read_batch(store, ledger, 0, a)
    read_batch(store, ledger, 1, a)  # read again by a later batch, unchanged: fine
    a.write_text("rewritten\n")
    with pytest.raises(BadRecordError, match="rewritten after the job read it"):
        read_batch(store, ledger, 2, a)
    assert store.progress().batch == 1  # the batch's transaction rolled back


def test_fingerprints_of_a_failed_batch_are_not_kept(tmp_path: Path, store: StateStore) -> None:
    ledger = SegmentLedger(store)
    a = publish(tmp_path, 1, "a\n")
    with pytest.raises(RuntimeError), store.transaction():
        ledger.record(0, [fingerprint(a, 1)])
        raise RuntimeError("a bad record later in the batch")
    a.write_text("repaired, longer\n")  # the upstream fixes the segment: that is fine
    assert ledger.verify_all() == 0


def test_the_rolling_check_walks_the_ledger_in_slices(tmp_path: Path, store: StateStore) -> None:
    ledger = SegmentLedger(store)
    paths = [publish(tmp_path, seq, f"{seq}\n") for seq in range(1, 6)]
    read_batch(store, ledger, 0, *paths)
    assert [ledger.verify_some(2) for _ in range(4)] == [2, 2, 1, 2]  # then it wraps around
    paths[0].unlink()
    with pytest.raises(BadRecordError, match="deleted"):
        for _ in range(3):  # the deleted one is found within one round
            ledger.verify_some(2)
