"""Seeing consistency: invariants and the truth per version (``deltamv check``), freshness
and what holds the watermark back (``deltamv status``); the oracle used by both and the
tests. The as-of reads are in :mod:`deltamv.reader`. See docs/check-status-read.md."""

from __future__ import annotations

from deltamv.check.invariants import CheckReport, ViewCheck, Violation, check_job
from deltamv.check.status import BlockerStatus, JobStatus, ViewStatus, job_status

__all__ = [
    "BlockerStatus",
    "CheckReport",
    "JobStatus",
    "ViewCheck",
    "ViewStatus",
    "Violation",
    "check_job",
    "job_status",
]
