"""The housekeeping policy a job applies after its batches (``[maintenance]`` in the config).

- **Log checkpoints.** Every ``checkpoint_interval`` versions of a table the job writes a
  Delta log checkpoint, so opening a table (the job once per run, readers once per
  read) replays at most that many JSON commits, however long the job runs. Log entries older than the table's ``delta.logRetentionDuration`` (30 days by
  default) behind a checkpoint are dropped.
- **Vacuum.** At most once per ``vacuum_interval``, data files no version younger than
  ``vacuum_retention`` needs are deleted from every view and published table: versions
  that were current within the retention window stay readable (time travel and
  ``deltamv check`` over them keep working), older ones lose their files. The job's
  internal mirrors (in the checkpoint) keep only their latest version's files.

Neither adds a version to any table (see :mod:`deltamv.delta.housekeeping`), so every
version still carries its watermark and the job's expected versions stay right. It runs
after a batch is finished, outside the exactly-once path: a crash in it loses nothing,
and it only deletes files the current versions do not reference. Housekeeping that fails
on storage (disk full, I/O errors) is logged and retried at the next pass; it never
stops the job, and the job's own commits still stop on the same fault.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from deltamv import faults
from deltamv.config import MaintenanceConfig
from deltamv.delta import housekeeping
from deltamv.delta.table import DeltaTableHandle
from deltamv.errors import StorageError

__all__ = ["Maintenance", "MaintenanceReport"]

log = logging.getLogger("deltamv.maintenance")


@dataclass
class MaintenanceReport:
    checkpointed: list[str] = field(default_factory=list)
    vacuumed_files: int = 0
    failed: list[str] = field(default_factory=list)


class Maintenance:
    """Applies a :class:`MaintenanceConfig` to a job's tables after its batches.

    ``tables`` maps a target name to ``(handle, internal)``; internal tables (the job's
    own copies) are vacuumed down to their latest version.
    """

    def __init__(
        self,
        policy: MaintenanceConfig,
        tables: Mapping[str, tuple[DeltaTableHandle, bool]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.tables = dict(tables)
        self._clock = clock
        self._checkpointed: dict[str, int | None] = {}
        self._last_vacuum: float | None = None

    def after_batch(self) -> MaintenanceReport:
        """One pass: checkpoint tables that are due, vacuum if the interval passed."""
        faults.point("before-maintenance")
        report = MaintenanceReport()
        now = self._clock()
        vacuum_due = (
            self._last_vacuum is None or now - self._last_vacuum >= self.policy.vacuum_interval
        )
        for target, (handle, internal) in self.tables.items():
            path = handle.path
            try:
                if self._checkpoint_due(target, handle):
                    self._checkpointed[target] = housekeeping.checkpoint(path)
                    report.checkpointed.append(target)
                if vacuum_due:
                    retention = 0.0 if internal else self.policy.vacuum_retention
                    if retention is not None:
                        gone = housekeeping.vacuum(path, retention_hours=retention / 3600)
                        report.vacuumed_files += len(gone)
            except StorageError as exc:
                log.warning("maintenance of %s skipped: %s", target, exc)
                report.failed.append(target)
        if vacuum_due:
            self._last_vacuum = now
        if report.checkpointed or report.vacuumed_files:
            log.info(
                "maintenance: checkpointed %s, vacuumed %d files",
                ", ".join(report.checkpointed) or "nothing", report.vacuumed_files,
            )  # fmt: skip
        return report

    def _checkpoint_due(self, target: str, handle: DeltaTableHandle) -> bool:
        every = self.policy.checkpoint_interval
        if every <= 0:
            return False
        if target not in self._checkpointed:
            self._checkpointed[target] = housekeeping.last_checkpoint(handle.path)
        version = handle.version()
        if version is None:
            return False
        last = self._checkpointed[target]
        return version - (last if last is not None else -1) >= every
