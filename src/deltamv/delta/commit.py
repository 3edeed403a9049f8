"""Commits: one version of a view is exactly one Delta commit.

The driver commits files that :mod:`deltamv.delta.files` wrote. A commit is atomic
(readers see all of its files or none), carries the job's app transaction
``(app_id, batch_id)`` and commit metadata, and is exactly-once per ``(app_id, batch_id)``
(a replayed batch is recognised and skipped). Commits never retry over another writer:
if the table moved since it was read, the commit fails with CommitConflictError and
nothing is written to the log.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from deltamv.delta._table import check_plain_parquet, open_table, translate_errors
from deltamv.delta.files import DataFile
from deltamv.delta.schema import delta_fields
from deltamv.delta.spark import USER_METADATA_KEY, user_metadata
from deltamv.errors import CommitConflictError, StorageError

__all__ = ["CommitResult", "commit", "committed_batch", "owner_of", "table_version"]

JOB_KEY = "deltamv.job"
WATERMARK_KEY = "deltamv.watermark"
BATCH_KEY = "deltamv.batch"


@dataclass(frozen=True)
class CommitResult:
    """The table's version after :func:`commit`; ``skipped`` if the batch was already there."""

    version: int
    skipped: bool


def commit(
    table_path: str,
    *,
    schema: pa.Schema,
    add: list[DataFile],
    replace: bool,
    app_id: str,
    batch_id: int,
    metadata: Mapping[str, str],
    expected_version: int | None,
) -> CommitResult:
    """Commit ``add`` (and, if ``replace``, the removal of every current file) as one version.

    - No table at ``table_path``: creates it; its version 0 is this commit, with
      ``schema``. A table someone else creates meanwhile is a CommitConflictError.
    - Idempotent: if the table's app transaction for ``app_id`` is already ``>= batch_id``
      the batch was committed before; nothing is committed and the result is
      ``CommitResult(<current version>, skipped=True)``. The files in ``add`` are left
      where they are (orphans for VACUUM).
    - ``expected_version`` (the version this job committed last): if the table is at
      another version, someone else wrote it; CommitConflictError.
    - ``replace=True`` removes every file of the version read and adds ``add`` in the same
      commit (a full overwrite, atomic for every reader); ``replace=False`` appends.
    - The table's schema must equal ``schema``; else CommitConflictError.
    - ``metadata`` goes into the commit info (``DeltaTable.history()``) together with
      ``deltamv.batch``; the app transaction ``(app_id, batch_id)`` is in the same commit.
      Its ``deltamv.*`` keys also go, as one JSON object, into the commit's
      ``userMetadata``, which Spark's ``DESCRIBE HISTORY`` shows.
    - Any concurrent commit between reading the table and committing fails the commit
      (no automatic retry): CommitConflictError. I/O failures: StorageError.
    """
    custom = {BATCH_KEY: str(batch_id), **metadata, USER_METADATA_KEY: user_metadata(metadata)}
    properties = CommitProperties(
        custom_metadata=custom,
        app_transactions=[Transaction(app_id, batch_id)],
        max_commit_retries=0,
    )
    job = metadata.get(JOB_KEY, app_id)
    table = open_table(table_path)
    if table is None:
        if expected_version is not None:
            raise CommitConflictError(
                f"table {table_path} does not exist but job {job} last committed version"
                f" {expected_version}: another writer deleted it"
            )
        return _create(table_path, schema, add, properties)

    with translate_errors(table_path):
        current = table.version()
        # Before the version check: a job that crashed after its commit but before it
        # recorded the new version replays the batch with the older expected_version.
        done = table.transaction_version(app_id)
        if done is not None and done >= batch_id:
            return CommitResult(current, skipped=True)
        if expected_version is not None and current != expected_version:
            raise CommitConflictError(
                f"table {table_path} is at version {current} but job {job} last committed"
                f" version {expected_version}: another writer committed to it"
            )
        _check_compatible(table, table_path, schema)
        now = _now_ms()
        actions: list[AddAction | RemoveAction] = []
        if replace:
            actions.extend(_removes(table, now))
        actions.extend(_add_actions(add, now))
        table.create_write_transaction(
            actions, mode="append", schema=schema, commit_properties=properties
        )
    # With no retries a successful commit is exactly the version after the one read.
    return CommitResult(current + 1, skipped=False)


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
    table = open_table(table_path)
    if table is None:
        return None
    with translate_errors(table_path):
        history = table.history()
    if not history:
        return None
    first = min(history, key=lambda h: int(h.get("version", 0)))
    job = first.get(JOB_KEY)
    return job if isinstance(job, str) else None


def _create(
    table_path: str, schema: pa.Schema, add: list[DataFile], properties: CommitProperties
) -> CommitResult:
    try:
        with translate_errors(table_path):
            create_table_with_add_actions(
                table_path,
                DeltaSchema.from_arrow(schema),
                _add_actions(add, _now_ms()),
                mode="error",
                commit_properties=properties,
            )
    except StorageError as e:
        # delta-rs reports "a table already exists" as a generic error: if a table is
        # there now, another writer created it between our look and our commit.
        if open_table(table_path) is not None:
            raise CommitConflictError(
                f"table {table_path} was created by another writer while this job created it"
            ) from e
        raise
    return CommitResult(0, skipped=False)


def _check_compatible(table: DeltaTable, table_path: str, schema: pa.Schema) -> None:
    check_plain_parquet(table, table_path)
    if table.metadata().partition_columns:
        raise CommitConflictError(
            f"table {table_path} is partitioned by {table.metadata().partition_columns};"
            " deltamv writes unpartitioned tables"
        )
    have, want = delta_fields(table.schema()), delta_fields(schema)
    if have != want:
        raise CommitConflictError(
            f"table {table_path} has columns {_describe(have)} but this job writes"
            f" {_describe(want)}"
        )


def _describe(fields: list[dict[str, object]]) -> str:
    def one(f: dict[str, object]) -> str:
        kind = f["type"] if isinstance(f["type"], str) else "struct"
        return f"{f['name']} {kind}{'' if f['nullable'] else ' NOT NULL'}"

    return "(" + ", ".join(one(f) for f in fields) + ")"


def _removes(table: DeltaTable, now: int) -> list[RemoveAction]:
    files = pa.table(table.get_add_actions(flatten=True))
    return [
        RemoveAction(path, True, now, size, {})
        for path, size in zip(
            files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), strict=True
        )
    ]


def _add_actions(files: list[DataFile], now: int) -> list[AddAction]:
    return [AddAction(f.path, f.size, dict(f.partition_values), now, True, f.stats) for f in files]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
