"""The segments a job has read, so that one deleted or rewritten later is noticed.

Segments are immutable once visible (CONTRACT section 2). The source reads each one
once; if the upstream later deletes or rewrites a segment the job has already applied,
the views silently stop matching the log. The ledger keeps each read segment's size,
modification time and a BLAKE2b digest of its bytes in the job state, and compares:

- at job start, every recorded segment (one ``stat`` each; the file is hashed again only
  when its size is equal but its mtime differs, so a restored identical copy passes);
- during a run, a rolling slice of the recorded segments per batch (bounded work per
  batch; a continuous job checks the whole ledger every ``len / slice`` batches);
- when a batch reads a segment already recorded (a replay after a crash), its content.

A mismatch is a BadRecordError naming the file: the job stops, nothing of the batch is
committed, and once the file is restored the job resumes.

Fingerprints are written just before the batch is ingested; until the state has
ingested that batch they are provisional (a bad record in it may be repaired by
rewriting the segment, a crash replays it), so checks look only at the segments of
batches the state holds, and a replay of the batch overwrites its own fingerprints.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

from deltamv.errors import BadRecordError
from deltamv.pipeline.state import PipelineState

__all__ = ["SegmentLedger"]

_DDL = """
CREATE TABLE IF NOT EXISTS segments (
    path TEXT PRIMARY KEY, region INTEGER NOT NULL, seq INTEGER NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, digest TEXT NOT NULL, batch INTEGER NOT NULL);
"""

SLICE = 256  # recorded segments checked per batch while running


def _digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class SegmentLedger:
    """Fingerprints of read segments, stored in the job's state database."""

    def __init__(self, state: PipelineState) -> None:
        self.state = state
        state.db.executescript(_DDL)
        self._cursor = ""  # the path checked last by the rolling check

    def record(self, batch: int, segments: Iterable[tuple[str, int, int]]) -> None:
        """Remember ``(path, region, seq)`` read by ``batch``; a changed re-read is an error."""
        rows = []
        for path, region, seq in sorted(set(segments)):
            old = self.state.db.execute(
                "SELECT size, mtime_ns, digest, batch FROM segments WHERE path = ?", (path,)
            ).fetchone()
            if old is not None and old[3] < batch:
                self._verify(path, *old[:3])
                continue
            try:
                st = os.stat(path)
                digest = _digest(path)
            except FileNotFoundError:
                raise BadRecordError(path, None, "segment deleted while the job read it") from None
            rows.append((path, region, seq, st.st_size, st.st_mtime_ns, digest, batch))
        with self.state.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO segments VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def verify_all(self) -> int:
        """Check every recorded segment; returns how many were checked."""
        rows = self.state.db.execute(
            "SELECT path, size, mtime_ns, digest FROM segments WHERE batch <= ?",
            (self.state.progress().batch,),
        ).fetchall()
        for row in rows:
            self._verify(*row)
        return len(rows)

    def verify_some(self, limit: int = SLICE) -> int:
        """Check the next ``limit`` recorded segments (wrapping around)."""
        rows = self.state.db.execute(
            "SELECT path, size, mtime_ns, digest FROM segments WHERE path > ? AND batch <= ?"
            " ORDER BY path LIMIT ?",
            (self._cursor, self.state.progress().batch, limit),
        ).fetchall()
        self._cursor = rows[-1][0] if len(rows) == limit else ""
        for row in rows:
            self._verify(*row)
        return len(rows)

    def _verify(self, path: str, size: int, mtime_ns: int, digest: str) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise BadRecordError(
                path, None, "segment deleted after the job read it (segments are immutable;"
                " restore it to resume)"
            ) from None  # fmt: skip
        if st.st_size != size:
            raise BadRecordError(
                path, None, f"segment rewritten after the job read it ({size} bytes then,"
                f" {st.st_size} now; segments are immutable: restore it to resume)"
            )  # fmt: skip
        if st.st_mtime_ns == mtime_ns:
            return
        if _digest(path) != digest:
            raise BadRecordError(
                path, None, "segment rewritten after the job read it (same size, other"
                " content; segments are immutable: restore it to resume)"
            )  # fmt: skip
        with self.state.transaction() as db:  # restored as it was: remember the new mtime
            db.execute("UPDATE segments SET mtime_ns = ? WHERE path = ?", (st.st_mtime_ns, path))
