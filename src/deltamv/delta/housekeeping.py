"""Table housekeeping that writes no version: log checkpoints, log cleanup, vacuum.

delta-rs' own ``vacuum`` commits ``VACUUM START``/``VACUUM END`` versions; those would
carry no watermark (docs/guarantees.md promises one on every version the job commits)
and would move the table past the version the job expects. So deltamv asks delta-rs
which files a vacuum would delete (a dry run) and deletes them itself.
"""

from __future__ import annotations

import json
import math

from pyarrow import fs as pafs

from deltamv.delta._table import file_paths, open_table, table_uri, translate_errors

__all__ = ["checkpoint", "last_checkpoint", "vacuum"]


def last_checkpoint(table_path: str) -> int | None:
    """The version of the table's latest log checkpoint (``_last_checkpoint``), or None."""
    filesystem, root = pafs.FileSystem.from_uri(table_uri(table_path))
    try:
        with filesystem.open_input_stream(f"{root}/_delta_log/_last_checkpoint") as f:
            return int(json.loads(f.read().decode("utf-8"))["version"])
    except (FileNotFoundError, OSError, ValueError, KeyError):
        return None


def checkpoint(table_path: str) -> int | None:
    """Write a log checkpoint at the latest version and drop log files past retention.

    Returns the version checkpointed (None when there is no table). Adds no version.
    Old log entries go only after ``delta.logRetentionDuration`` (30 days by default).
    """
    table = open_table(table_path)
    if table is None:
        return None
    with translate_errors(table_path):
        table.create_checkpoint()
        table.cleanup_metadata()
        return table.version()


def vacuum(table_path: str, *, retention_hours: float) -> list[str]:
    """Delete the data files no version younger than ``retention_hours`` (rounded up to
    whole hours) needs.

    A file is deleted when the table removed it more than ``retention_hours`` ago, or
    when no log entry names it (a crashed writer's leftover) and it is older than that.
    The latest version's files are never touched. Adds no version. Returns the paths.
    """
    table = open_table(table_path)
    if table is None:
        return []
    with translate_errors(table_path):
        doomed = table.vacuum(
            # delta-rs takes whole hours: rounded up, never down (half an hour is one)
            retention_hours=max(0, math.ceil(retention_hours)),
            dry_run=True,
            enforce_retention_duration=False,
            full=True,
        )
        keep = set(file_paths(table))
    filesystem, root = pafs.FileSystem.from_uri(table_uri(table_path))
    deleted = []
    for rel in doomed:
        full = rel if "://" in rel or rel.startswith("/") else f"{root}/{rel}"
        if full in keep or table_uri(full) in keep:
            continue  # belt and braces: never a file of the current version
        with translate_errors(table_path):
            try:
                filesystem.delete_file(full)
            except FileNotFoundError:
                continue
        deleted.append(full)
    return deleted
