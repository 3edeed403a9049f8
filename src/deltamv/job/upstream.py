"""What a job reads: the change log, or a PostgreSQL database.

An :class:`Upstream` gives the job a Spark streaming source (which plans the batches),
the start (a snapshot to load, if any), and for each batch the changes it releases at
the batch's watermark, read inside the batch's state transaction. Everything after that
(mirrors, views, outputs) is the same for both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from deltamv.compute import Compute
from deltamv.errors import StateError
from deltamv.pipeline.ingest import IngestResult
from deltamv.state.store import StateStore

__all__ = ["Lap", "Upstream", "logged_offset"]

Lap = Callable[[str], None]  # marks the end of a phase of the batch, for its report


class Upstream(Protocol):
    def start_ts(self) -> int:
        """The job's start timestamp (a snapshot's ts; 0 without one)."""
        ...

    def open(self, store: StateStore) -> None:
        """Prepare for a run (after the state is open, before anything is read)."""
        ...

    def snapshot(self, store: StateStore) -> Iterable[tuple[str, pa.Table]] | None:
        """The rows to load before the first batch (None: start empty). Called only
        while the state is not bootstrapped; may record positions in ``store``."""
        ...

    # Whether :meth:`stream` reads the state (a start position the snapshot records): if
    # not, the job starts the streaming query while it opens (Spark's start of the query
    # then overlaps the job's own).
    stream_reads_state: bool

    def stream(self, spark: SparkSession, store: StateStore) -> DataFrame:
        """The Spark streaming source that plans the batches."""
        ...

    def prefetch(self, store: StateStore, *, once: bool) -> None:
        """Start reading, in the background, what the run's first batch will most likely
        read (the batch uses it only if it reads exactly that; may do nothing)."""
        ...

    def ingest(self, store: StateStore, compute: Compute, batch: int, lap: Lap) -> IngestResult:
        """Read ``batch`` and release its changes (inside the batch's state transaction)."""
        ...

    def planned_offsets(self, batch: int) -> Mapping[str, Any]:
        """Where ``batch`` ends by Spark's offset log, as the keys of the offsets the
        ingest records for it (compared with them when Spark plans from that batch)."""
        ...

    def commit_metadata(self, store: StateStore, batch: int) -> Mapping[str, str]:
        """Extra commit-info keys for the versions of ``batch``."""
        ...

    def locate(self, store: StateStore, key: str, commit_ts: int) -> tuple[str, int] | None:
        """The file and line of the record carrying the change of ``key`` committed at
        ``commit_ts`` (its PREWRITE, or COMMITTED from a region's initial scan), for an
        error found after the change was released; None if the upstream has no such
        records. Called on an error's path only: it may read many files."""
        ...

    def after_batch(self, store: StateStore, batch: int) -> None:
        """A batch is finished (every output committed); also called again for a batch
        Spark replays that the job had finished."""
        ...

    def after_run(self, store: StateStore) -> None:
        """The run ends (the streaming query stopped)."""
        ...

    def close(self) -> None:
        """The run is over, whether it failed or not: wait for what :meth:`prefetch`
        started and let go of it."""
        ...


def logged_offset(offset_log: Path, batch: int) -> Any:
    """The source's end offset of ``batch`` as Spark's offset log holds it (parsed JSON).

    The job reads a batch by these offsets, not by the DataFrame Spark hands it, so a
    replayed batch reads exactly what its first attempt read.
    """
    path = offset_log / str(batch)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise StateError(
            f"Spark's offset log has no batch {batch} ({path}): the streaming checkpoint"
            " was changed or removed; restore it or start with a new checkpoint"
        ) from None
    # Spark's offset log: a version line, the batch metadata, then one offset per source.
    if len(lines) < 3 or lines[0].strip() != "v1":
        raise StateError(f"cannot read Spark's offset log entry {path}")
    return json.loads(lines[2])
