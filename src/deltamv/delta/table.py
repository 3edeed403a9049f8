"""One handle per Delta table per run: the log is opened once and followed incrementally.

Opening a table replays its log; a job that opens every table several times per batch
pays that again and again. A :class:`DeltaTableHandle` opens its table lazily on first
use, answers every question about the version it holds (files, schema, app transactions,
commit infos), and moves forward with ``DeltaTable.update_incremental()``, which reads
only the log entries added since. delta-rs does not show a table object its own
``create_write_transaction`` commit until it is refreshed: whoever commits through a
handle calls :meth:`DeltaTableHandle.refresh` afterwards.

A handle is not thread-safe and reads, never writes: commits are made by
:mod:`deltamv.delta.sink` and :mod:`deltamv.delta.commit`.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from deltamv.delta._table import check_plain_parquet, commit_infos, translate_errors
from deltamv.delta.schema import delta_fields
from deltamv.errors import CommitConflictError, DeltaMVError

__all__ = ["DeltaTableHandle", "TableFile"]


@dataclass(frozen=True)
class TableFile:
    """One data file of the table's current version, as its add action describes it.

    ``path`` is the add action's path (relative to the table root, URL-encoded as Delta
    writes it); ``num_records`` is None when the writer recorded no statistics.
    """

    path: str
    size: int
    num_records: int | None
    modification_time: int


class DeltaTableHandle:
    """The Delta table at ``path``, opened once and followed version by version.

    Nothing is read until a method needs it. Answers always describe the version the
    handle holds (:meth:`version`); :meth:`refresh` moves it to the latest version.
    Caches keyed by version (file list, add actions) are dropped when the version moves;
    the per-file cache (:meth:`file_cache`) survives, since a file's contents never change.
    """

    def __init__(self, path: str, *, storage_options: dict[str, str] | None = None) -> None:
        self._path = path
        self._uri = path if "://" in path else os.path.abspath(path)
        self._storage_options = storage_options
        self._table: DeltaTable | None = None
        self._opened = False
        self._add_actions: pa.Table | None = None
        self._files: tuple[TableFile, ...] | None = None
        self._file_cache: dict[tuple[str, str], Any] = {}
        self._fs: tuple[pafs.FileSystem, str] | None = None

    @property
    def path(self) -> str:
        """The table's path as given."""
        return self._path

    @property
    def uri(self) -> str:
        """The table's location as an absolute path or URI."""
        return self._uri

    def exists(self) -> bool:
        """Whether a Delta table is there (as of the last open or refresh)."""
        return self._ensure() is not None

    def version(self) -> int | None:
        """The version the handle holds, or None when there is no table."""
        table = self._ensure()
        if table is None:
            return None
        with translate_errors(self._path):
            return table.version()

    def delta_table(self) -> DeltaTable:
        """The underlying delta-rs table (for :mod:`deltamv.delta` only); DeltaMVError if none."""
        table = self._ensure()
        if table is None:
            raise DeltaMVError(f"there is no Delta table at {self._path}")
        return table

    def arrow_schema(self) -> pa.Schema:
        """The table's schema as Arrow."""
        table = self.delta_table()
        with translate_errors(self._path):
            return pa.schema(table.schema().to_arrow())

    def check_plain(self) -> None:
        """Refuse a table plain Parquet readers and writers cannot handle correctly.

        Deletion vectors and column mapping: DeltaMVError (as every deltamv reader);
        partition columns: CommitConflictError (deltamv writes unpartitioned tables).
        """
        table = self.delta_table()
        with translate_errors(self._path):
            check_plain_parquet(table, self._path)
            partitions = table.metadata().partition_columns
        if partitions:
            raise CommitConflictError(
                f"table {self._path} is partitioned by {partitions};"
                " deltamv writes unpartitioned tables"
            )

    def check_schema(self, schema: pa.Schema) -> None:
        """CommitConflictError unless the table stores exactly the columns of ``schema``."""
        table = self.delta_table()
        with translate_errors(self._path):
            have = delta_fields(table.schema())
        want = delta_fields(schema)
        if have != want:
            raise CommitConflictError(
                f"table {self._path} has columns {describe_fields(have)} but this job writes"
                f" {describe_fields(want)}"
            )

    def transaction_version(self, app_id: str) -> int | None:
        """The last version ``app_id`` recorded as app transaction, or None (or no table)."""
        table = self._ensure()
        if table is None:
            return None
        with translate_errors(self._path):
            return table.transaction_version(app_id)

    def add_actions(self) -> pa.Table:
        """The current version's add actions, flattened: path, size_bytes,
        modification_time, num_records, ``null_count.<col>``, ``min.<col>``, ``max.<col>``.

        Statistics columns are typed as delta-rs parsed them; they are bounds, not always
        exact values (Delta truncates strings and rounds timestamps to milliseconds).
        """
        if self._add_actions is None:
            table = self.delta_table()
            with translate_errors(self._path):
                # pa.table() on delta-rs' arro3 table takes ~15 ms; the C stream, ~0.1 ms.
                self._add_actions = pa.RecordBatchReader.from_stream(
                    table.get_add_actions(flatten=True)
                ).read_all()
        return self._add_actions

    def files(self) -> tuple[TableFile, ...]:
        """The data files of the current version (empty when there is no table)."""
        if self._files is None:
            if not self.exists():
                return ()
            actions = self.add_actions()
            self._files = tuple(
                TableFile(path, size, records, mtime)
                for path, size, records, mtime in zip(
                    actions.column("path").to_pylist(),
                    actions.column("size_bytes").to_pylist(),
                    actions.column("num_records").to_pylist(),
                    actions.column("modification_time").to_pylist(),
                    strict=True,
                )
            )
        return self._files

    def commits_since(self, version: int) -> list[dict[str, object]]:
        """The commit infos of the versions after ``version`` up to the one the handle
        holds, oldest first (from the log's commit files: ``_table.commit_infos``)."""
        table = self._ensure()
        if table is None:
            return []
        current = table.version()
        if current <= version:
            return []
        return commit_infos(self._uri, after=version, upto=current)

    def refresh(self) -> None:
        """Move to the table's latest version, reading only the log entries added since.

        Opens the table if the handle has not seen one yet (a table created meanwhile).
        """
        if self._table is None:
            self._opened = False
            self._ensure()
        else:
            before = self._table.version()
            with translate_errors(self._path):
                self._table.update_incremental()
            if self._table.version() != before:
                self._version_moved()

    def reload(self) -> None:
        """Forget everything but the per-file cache and open the table afresh."""
        self._table = None
        self._opened = False
        self._version_moved()

    def file_cache(self, kind: str) -> _FileCache:
        """A cache of facts about data files (they never change once written), by ``kind``."""
        return _FileCache(self._file_cache, kind)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem holding the table and the table root within it."""
        if self._fs is None:
            with translate_errors(self._path):
                fs, root = pafs.FileSystem.from_uri(self._uri)
            self._fs = (fs, root.rstrip("/"))
        return self._fs

    def file_location(self, path: str) -> tuple[pafs.FileSystem, str]:
        """Where the data file of an add action's ``path`` is: filesystem and path in it."""
        if "://" in path:
            with translate_errors(self._path):
                return pafs.FileSystem.from_uri(path)
        fs, root = self.filesystem()
        return fs, f"{root}/{urllib.parse.unquote(path)}"

    def _ensure(self) -> DeltaTable | None:
        if not self._opened:
            with translate_errors(self._path):
                try:
                    self._table = DeltaTable(self._uri, storage_options=self._storage_options)
                except TableNotFoundError:
                    self._table = None
            self._opened = True
            self._version_moved()
        return self._table

    def _version_moved(self) -> None:
        self._add_actions = None
        self._files = None


class _FileCache:
    """A view of a handle's per-file cache for one kind of fact."""

    def __init__(self, store: dict[tuple[str, str], Any], kind: str) -> None:
        self._store = store
        self._kind = kind

    def get(self, path: str) -> Any:
        return self._store.get((self._kind, path))

    def put(self, path: str, value: Any) -> None:
        self._store[(self._kind, path)] = value

    def retain(self, paths: set[str]) -> None:
        """Drop the entries of files not in ``paths`` (files the table no longer holds)."""
        for key in [k for k in self._store if k[0] == self._kind and k[1] not in paths]:
            del self._store[key]


def describe_fields(fields: list[dict[str, object]]) -> str:
    """``(name type [NOT NULL], ...)`` for an error message."""

    def one(f: dict[str, object]) -> str:
        kind = f["type"] if isinstance(f["type"], str) else "struct"
        return f"{f['name']} {kind}{'' if f['nullable'] else ' NOT NULL'}"

    return "(" + ", ".join(one(f) for f in fields) + ")"
