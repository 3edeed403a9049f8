"""What a deltamv commit carries, and what a table says about who committed to it.

Every version a job commits (through :class:`deltamv.delta.sink.TableSink`) holds, in
its commit info, the job's name (:data:`JOB_KEY`), the watermark of its rows
(:data:`WATERMARK_KEY`, a decimal string) and the batch (:data:`BATCH_KEY`), and carries
the app transaction ``(app_id, batch)`` that makes the commit idempotent. The functions
here answer questions about a table by path without keeping a handle: its version, the
last batch an app transaction committed, and the job that created it.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltamv.delta._table import commit_infos, open_table, translate_errors

__all__ = [
    "BATCH_KEY",
    "JOB_KEY",
    "WATERMARK_KEY",
    "CommitResult",
    "committed_batch",
    "owner_of",
    "table_version",
]

JOB_KEY = "deltamv.job"
WATERMARK_KEY = "deltamv.watermark"
BATCH_KEY = "deltamv.batch"


@dataclass(frozen=True)
class CommitResult:
    """The table's version after a commit; ``skipped`` if the batch was already there.

    The counts describe what the commit did: data files added and removed, and the rows
    and bytes of the files added (all 0 for a skipped batch).
    """

    version: int
    skipped: bool
    files_added: int = 0
    files_removed: int = 0
    rows_written: int = 0
    bytes_written: int = 0


def committed_batch(table_path: str, app_id: str) -> int | None:
    """The last batch ``app_id`` committed to the table (its app transaction), or None."""
    table = open_table(table_path)
    if table is None:
        return None
    with translate_errors(table_path):
        return table.transaction_version(app_id)


def table_version(table_path: str) -> int | None:
    """The table's latest version, or None if there is no Delta table at ``table_path``."""
    table = open_table(table_path)
    if table is None:
        return None
    with translate_errors(table_path):
        return table.version()


def owner_of(table_path: str) -> str | None:
    """The ``deltamv.job`` that created the table, or None (no table, or not deltamv's).

    A job compares this with its own name before its first commit to refuse writing into
    a table something else owns. Later foreign commits are caught by ``expected_version``.
    Reads the earliest commit the log still holds.
    """
    first = commit_infos(table_path, first=True)  # (none where there is no table)
    job = first[0].get(JOB_KEY) if first else None
    return job if isinstance(job, str) else None
