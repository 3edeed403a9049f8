"""Opening tables and turning delta-rs failures into deltamv's error families."""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import (
    CommitFailedError,
    DeltaError,
    DeltaProtocolError,
    TableNotFoundError,
)
from pyarrow import fs as pafs

from deltamv.errors import CommitConflictError, DeltaMVError, StorageError

# Readers here read Parquet files by themselves: a table that needs a Delta reader to
# interpret its files (deletion vectors, column mapping) would be read wrong.
_UNREADABLE_FEATURES = {"deletionVectors", "columnMapping"}


def table_uri(path: str) -> str:
    """A table's path as a URI pyarrow's file systems take (a local path made absolute)."""
    return path if "://" in path else os.path.abspath(path)


def file_paths(table: DeltaTable) -> list[str]:
    """The data files of ``table``'s version as paths to open: delta-rs' ``file_uris()``
    percent-encodes local paths (``/out/my views`` as ``/out/my%20views``), which no file
    system then finds."""
    return [u if "://" in u else urllib.parse.unquote(u) for u in table.file_uris()]


def open_table(table_path: str, version: int | None = None) -> DeltaTable | None:
    """The table at ``table_path`` (at ``version``), or None if there is no table there."""
    with translate_errors(table_path):
        try:
            return DeltaTable(table_path, version=version)
        except TableNotFoundError:
            return None


def require_table(table_path: str, version: int | None = None) -> DeltaTable:
    """The table at ``table_path`` (at ``version``); DeltaMVError if there is none."""
    table = open_table(table_path, version)
    if table is None:
        at = "" if version is None else f" with a version {version}"
        raise DeltaMVError(f"there is no Delta table at {table_path}{at}")
    return table


def commit_infos(
    table_path: str, *, after: int = -1, upto: int | None = None, first: bool = False
) -> list[dict[str, Any]]:
    """The commit infos of the versions in ``(after, upto]`` that the log still holds,
    oldest first (``first``: only the oldest), each with its ``version``.

    Read from the log's commit files, each numbered by its name: delta-rs' ``history()``
    numbers the commits it reads down from the version the table was opened at, so a
    commit landing meanwhile gave every version the next one's commit info. With
    ``upto`` the files are opened by name (a log holds up to a month of versions: not
    listed at every start). A commit file a log cleanup drops meanwhile is skipped."""
    infos: list[dict[str, Any]] = []
    with translate_errors(table_path):
        filesystem, root = pafs.FileSystem.from_uri(table_uri(table_path))
        if upto is None:
            log = pafs.FileSelector(f"{root}/_delta_log", allow_not_found=True)
            found = filesystem.get_file_info(log)
            numbered = sorted(
                (int(e.base_name[:20]), e.path)
                for e in found
                if _is_commit_file(e.base_name) and int(e.base_name[:20]) > after
            )
        else:
            numbered = [(v, _commit_file(root, v)) for v in range(after + 1, upto + 1)]
        for version, path in numbered:
            try:
                with filesystem.open_input_stream(path) as f:
                    commit = _commit_info(f.read().decode("utf-8"))
            except FileNotFoundError:
                continue
            infos.append({**commit, "version": version})
            if first:
                break
    return infos


def empty_commit_files(table_path: str, *, after: int, upto: int) -> list[str]:
    """The commit files of versions ``(after, upto]`` that are empty: a write cut short (a
    crash without a sync, a full disk). delta-rs reads one as a version that changed
    nothing."""
    with translate_errors(table_path):
        filesystem, root = pafs.FileSystem.from_uri(table_uri(table_path))
        paths = [_commit_file(root, v) for v in range(after + 1, upto + 1)]
        found = filesystem.get_file_info(paths) if paths else []
    return [e.path for e in found if e.type == pafs.FileType.File and e.size == 0]


def _commit_file(root: str, version: int) -> str:
    return f"{root}/_delta_log/{version:020d}.json"


def _is_commit_file(name: str) -> bool:
    return len(name) == 25 and name.endswith(".json") and name[:20].isdigit()


def _commit_info(log_entry: str) -> dict[str, Any]:
    for line in log_entry.splitlines():
        if '"commitInfo"' in line:
            action = json.loads(line)
            if isinstance(action.get("commitInfo"), dict):
                return dict(action["commitInfo"])
    return {}


def check_plain_parquet(table: DeltaTable, table_path: str) -> None:
    """Refuse a table whose files a plain Parquet reader cannot read correctly."""
    protocol = table.protocol()
    features = set(protocol.reader_features or [])
    config = table.metadata().configuration
    mapping = config.get("delta.columnMapping.mode", "none")
    if features & _UNREADABLE_FEATURES or mapping not in (None, "none"):
        raise DeltaMVError(
            f"table {table_path} uses {sorted(features & _UNREADABLE_FEATURES) or ['columnMapping']};"
            " deltamv reads only tables without deletion vectors or column mapping"
        )


@contextlib.contextmanager
def translate_errors(table_path: str) -> Iterator[None]:
    """Map delta-rs and OS failures to CommitConflictError / StorageError (one line)."""
    try:
        yield
    except CommitFailedError as e:
        raise CommitConflictError(
            f"commit to table {table_path} failed: another writer committed to it ({_line(e)})"
        ) from e
    except DeltaProtocolError as e:
        raise CommitConflictError(
            f"table {table_path} needs Delta features deltamv does not write: {_line(e)}"
        ) from e
    except DeltaError as e:
        raise StorageError(f"Delta table {table_path}: {_line(e)}") from e
    except FileNotFoundError as e:
        raise StorageError(
            f"Delta table {table_path}: a file it names is gone ({_line(e)}): deleted by"
            " something else, or, for a version older than the vacuum's retention, by a vacuum"
        ) from e
    except OSError as e:
        raise StorageError(f"Delta table {table_path}: {_line(e)}") from e


def _line(e: BaseException) -> str:
    """delta-rs' message as one line: without its terminal colours (even when not on a
    terminal) and without the backtrace some errors carry (" 0: <unknown> 1: ...")."""
    text = " ".join(_COLOUR.sub("", str(e)).split())
    frames = _FRAMES.search(text)
    if frames is not None:
        text = text[: frames.start()]
    return text if len(text) <= 300 else text[:297] + "..."


_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_FRAMES = re.compile(r" 0: \S.*? 1: ")
