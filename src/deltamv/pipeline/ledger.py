"""The segments a job has read, so that one deleted or rewritten later is noticed.

Segments are immutable once visible. The job reads each one once; if the upstream
later deletes or rewrites a segment the job has already applied, the views silently
stop matching the log. The ledger keeps each read segment's size, modification time and
a BLAKE2b digest of the bytes the job parsed (taken while reading them, not by a second
read), and compares:

- at job start, every recorded segment (one ``stat`` each; the file is hashed again only
  when its size is equal but its mtime differs, so a restored identical copy passes);
- during a run, a rolling slice of the recorded segments per batch (bounded work per
  batch; a continuous job checks the whole ledger every ``len / slice`` batches);
- when a batch reads a segment already recorded (a replay after a crash), its content.

A mismatch is a BadRecordError naming the file: the job stops, nothing of the batch is
committed, and once the file is restored the job resumes.

Fingerprints are recorded in the batch's state transaction; a bad record in a batch
rolls them back with everything else, so repairing it by rewriting the segment is fine.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

from deltamv.errors import BadRecordError
from deltamv.state.store import SegmentRecord, StateStore

__all__ = ["SLICE", "SegmentLedger", "digest_file"]

SLICE = 256  # recorded segments checked per batch while running


def digest_file(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class SegmentLedger:
    """Fingerprints of read segments, kept in the job's state."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._cursor = ""  # the path checked last by the rolling check

    def record(self, batch: int, segments: Iterable[SegmentRecord]) -> None:
        """Remember the segments ``batch`` read (inside the batch's transaction). A segment
        an earlier batch recorded must still be what it was."""
        fresh = []
        known = self.store.segments_recorded([s.path for s in segments])
        for seg in segments:
            old = known.get(seg.path)
            if old is not None and old.batch < batch:
                if (old.size, old.digest) != (seg.size, seg.digest):
                    raise BadRecordError(
                        seg.path, None, "segment rewritten after the job read it (segments are"
                        " immutable: restore it to resume)",
                    )  # fmt: skip
                continue
            fresh.append(SegmentRecord(seg.path, seg.region, seg.seq, seg.size, seg.mtime_ns,
                                       seg.digest, batch))  # fmt: skip
        self.store.record_segments(fresh)

    def verify_all(self) -> int:
        """Check every recorded segment; returns how many were checked."""
        count = 0
        for record in self.store.segments_up_to(self.store.progress().batch):
            self._verify(record)
            count += 1
        return count

    def verify_some(self, limit: int = SLICE) -> int:
        """Check the next ``limit`` recorded segments (wrapping around)."""
        records = self.store.segments_after(self._cursor, self.store.progress().batch, limit)
        self._cursor = records[-1].path if len(records) == limit else ""
        for record in records:
            self._verify(record)
        return len(records)

    def _verify(self, record: SegmentRecord) -> None:
        path = record.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise BadRecordError(
                path, None, "segment deleted after the job read it (segments are immutable;"
                " restore it to resume)"
            ) from None  # fmt: skip
        if st.st_size != record.size:
            raise BadRecordError(
                path, None, f"segment rewritten after the job read it ({record.size} bytes then,"
                f" {st.st_size} now; segments are immutable: restore it to resume)"
            )  # fmt: skip
        if st.st_mtime_ns == record.mtime_ns:
            return
        if digest_file(path) != record.digest:
            raise BadRecordError(
                path, None, "segment rewritten after the job read it (same size, other"
                " content; segments are immutable: restore it to resume)"
            )  # fmt: skip
        with self.store.transaction():  # restored as it was: remember the new mtime
            self.store.update_segment_mtime(path, st.st_mtime_ns)
