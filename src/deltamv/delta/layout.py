"""Key-range file layout: a table's files hold disjoint ranges of its first layout column.

Rows live in Parquet files sorted by the layout columns. Files cover disjoint ranges of
the first layout column (the *key*; NULLs sort first, then NaN, then values ascending, as
Arrow sorts with nulls at the start), hold at most ``target_file_rows`` rows each, and
rows with equal keys never straddle two files unless that one key alone has more rows
than a file may hold. A change then touches only the files whose ranges hold its keys.

Ranges: the lowest and highest key of each file, from its add action's statistics when
those are exact (integers and dates; strings shorter than the 32 characters Delta
truncates to), else from the file's Parquet footer statistics, else from reading the key
column. They are cached in the table's :class:`~deltamv.delta.table.DeltaTableHandle`, and
the ranges of files written here are known without reading anything.

Routing (:meth:`KeyRangeLayout.plan`): a removed row may be in any file whose range holds
its key; an added row goes to a file whose range holds its key, else to the file before
the gap it falls in (the first file for keys below every range), so appends of increasing
keys go to the last file only; or, when that file holds more than four times the rows
appended (and more than 1/16 of a file), to new files of their own, so that a batch
appending n rows rewrites O(n) rows. Those small files do not pile up: once the table
ends in :data:`MERGE_FILES` files under half the target each, the next such append
rewrites them with it (at most two files' worth of them, every few batches). Files that
share a removed key are rewritten together.
Everything is vectorised over the change: keys and range bounds are ranked together by
Arrow and located with ``numpy.searchsorted``.

Sizing: a rewritten group of files is re-chunked into ceil(rows / target) files of even
size, cut at key boundaries; when the change appends keys beyond the table's last file,
that file's group is filled greedily instead (full files, the remainder last), so a table
that grows at its end keeps full files. Files untouched by a change are never rewritten,
nor merged when they shrink.

Memory: a group of files is rewritten in memory when it holds at most ``in_memory_rows``
rows (4 files' worth by default); a larger group (one key with very many rows, or files
another engine wrote in no key order) is read file by file and sorted by DuckDB within
``sort_memory_limit``, spilling to a temporary folder, as a Replace given batches is.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltamv.delta._stats import STRING_PREFIX
from deltamv.delta._table import translate_errors
from deltamv.delta._zset import ZSet, apply, check_nothing_owed, remove_owed, sample_row
from deltamv.delta._zset import split as split_change
from deltamv.delta.files import conform_table
from deltamv.delta.table import DeltaTableHandle
from deltamv.errors import DeltaMVError, StateError, StorageError

__all__ = ["DEFAULT_TARGET_FILE_ROWS", "FileRange", "KeyRangeLayout", "Rewrite"]

DEFAULT_TARGET_FILE_ROWS = 262_144
# Appends that would start a file of their own merge with the table's last files instead
# once that many of them hold under half a file each.
MERGE_FILES = 4
_STREAM_BATCH_ROWS = 65_536


@dataclass(frozen=True, eq=False)
class FileRange:
    """One data file and the lowest and highest key it holds (``bounds``, 2 values).

    ``bounds[0]`` is NULL when the file holds a NULL key; both are NULL when it holds
    only NULL keys (or no rows).
    """

    path: str
    size: int
    num_records: int
    bounds: pa.Array


@dataclass(frozen=True, eq=False)
class Rewrite:
    """A group of current files (maybe none) to rewrite with part of a change.

    ``fill`` is true when the change appends keys beyond the table's last file (or the
    table has none): the new files are filled greedily, not cut evenly.
    """

    files: tuple[FileRange, ...]
    change: ZSet
    fill: bool


class KeyRangeLayout:
    """The key-range layout of one table: ``columns`` sort the rows, ``columns[0]`` ranges
    the files, at most ``target_file_rows`` rows per file."""

    def __init__(
        self,
        schema: pa.Schema,
        columns: Sequence[str],
        *,
        target_file_rows: int = DEFAULT_TARGET_FILE_ROWS,
        sort_memory_limit: str = "1GB",
        in_memory_rows: int | None = None,
    ) -> None:
        if isinstance(columns, str) or not columns:
            raise ValueError(f"a layout needs a non-empty list of columns, not {columns!r}")
        if target_file_rows < 1:
            raise ValueError(f"target_file_rows must be >= 1, not {target_file_rows}")
        for name in columns:
            if name not in schema.names:
                raise DeltaMVError(f"layout column {name!r} is not a column of {schema.names}")
            if not _orderable(schema.field(name).type):
                raise DeltaMVError(
                    f"layout column {name!r} has type {schema.field(name).type}, which has no"
                    " order; a layout column must be a number, string, binary, boolean, date"
                    " or timestamp"
                )
        if len(set(columns)) != len(columns):
            raise ValueError(f"layout columns repeat: {list(columns)}")
        self.schema = schema
        self.columns = tuple(columns)
        self.key = columns[0]
        self.key_type = schema.field(self.key).type
        self.target_file_rows = target_file_rows
        self.sort_memory_limit = sort_memory_limit
        # Groups of files holding more rows than this are rewritten as a stream.
        self.in_memory_rows = 4 * target_file_rows if in_memory_rows is None else in_memory_rows

    # -- ordering and chunking ------------------------------------------------------------

    def sort(self, table: pa.Table) -> pa.Table:
        """``table`` sorted by the layout columns (NULLs, then NaN, then values)."""
        if table.num_rows <= 1:
            return table
        return table.take(
            pc.sort_indices(table, sort_keys=[(c, "ascending", "at_start") for c in self.columns])
        )

    def split(self, ordered: pa.Table, *, fill: bool) -> list[pa.Table]:
        """Cut sorted rows into files: at most the target each, cut between keys.

        ``fill``: full files and the remainder last; else ceil(n / target) even files.
        """
        n = ordered.num_rows
        if n == 0:
            return []
        if n <= self.target_file_rows:
            return [ordered]
        starts = run_starts(ordered.column(self.key))
        ends = _cuts(starts, n, self.target_file_rows, fill=fill)
        return [ordered.slice(a, b - a) for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def arrange(
        self, data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]
    ) -> Iterator[pa.Table]:
        """All of ``data`` as the contents of new files, in key order.

        A ``pa.Table`` is sorted in memory. Batches are sorted by DuckDB, which spills to a
        temporary folder beyond ``sort_memory_limit``: memory stays bounded for any input.
        """
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if isinstance(data, pa.Table):
            yield from self.split(self.sort(conform_table(data, self.schema)), fill=True)
            return
        buffered: list[pa.Table] = []
        rows = 0
        for batch in self._sorted_stream(data):
            buffered.append(batch)
            rows += batch.num_rows
            if rows <= self.target_file_rows:
                continue
            pending = pa.concat_tables(buffered).combine_chunks()
            chunks = self.split(pending, fill=True)
            # Every chunk but the last ends where the key changes inside the buffer (or
            # mid-run of one over-long key): rows still to come cannot join them.
            yield from chunks[:-1]
            buffered, rows = [chunks[-1]], chunks[-1].num_rows
        if rows:
            yield from self.split(pa.concat_tables(buffered).combine_chunks(), fill=True)

    def _sorted_stream(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
        import duckdb

        failed: list[BaseException] = []

        def conformed() -> Iterator[pa.RecordBatch]:
            try:
                for batch in batches:
                    table = conform_table(pa.Table.from_batches([batch]), self.schema)
                    yield from table.to_batches()
            except BaseException as e:
                failed.append(e)  # DuckDB would hand it back as text in its own error
                raise

        spill = tempfile.mkdtemp(prefix="deltamv-sort-")
        con = duckdb.connect(
            config={"memory_limit": self.sort_memory_limit, "temp_directory": spill}
        )
        try:
            reader = pa.RecordBatchReader.from_batches(self.schema, conformed())
            con.register("data", reader)
            order = ", ".join(self._duckdb_order(c) for c in self.columns)
            result = con.sql(f"SELECT * FROM data ORDER BY {order}")
            for batch in result.to_arrow_reader(_STREAM_BATCH_ROWS):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch]).cast(self.schema)
        except duckdb.Error as e:
            if failed:
                raise failed[0] from None
            if isinstance(e, duckdb.IOException | duckdb.OutOfMemoryException):
                text = " ".join(str(e).split())[:300]
                raise StorageError(f"sorting rows in {spill} failed: {text}") from e
            raise
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)

    def _duckdb_order(self, column: str) -> str:
        quoted = '"' + column.replace('"', '""') + '"'
        if pa.types.is_floating(self.schema.field(column).type):
            # Arrow puts NaN right after the NULLs, before every number; DuckDB puts it last.
            return (
                f"CASE WHEN {quoted} IS NULL THEN 0 WHEN isnan({quoted}) THEN 1 ELSE 2 END,"
                f" {quoted}"
            )
        return f"{quoted} ASC NULLS FIRST"

    # -- ranges ---------------------------------------------------------------------------

    def file_ranges(self, handle: DeltaTableHandle) -> list[FileRange]:
        """The key range of every current file, in key order; cached in ``handle``."""
        files = handle.files()
        if not files:
            return []
        cache = handle.file_cache(f"range:{self.key}")
        cache.retain({f.path for f in files})
        missing = [i for i, f in enumerate(files) if cache.get(f.path) is None]
        if missing:
            from_stats = self._stats_bounds(handle.add_actions())
            for i in missing:
                f = files[i]
                bounds = from_stats[i] if from_stats is not None else None
                if bounds is None:
                    bounds = self._footer_bounds(handle, f.path)
                if bounds is None:
                    bounds = self._read_bounds(handle, f.path)
                cache.put(f.path, bounds)
        ranges = []
        for f in files:
            bounds, records = cache.get(f.path)
            ranges.append(FileRange(f.path, f.size, records, bounds))
        return self._in_key_order(ranges)

    def remember(self, handle: DeltaTableHandle, path: str, contents: pa.Table) -> None:
        """Cache the range of a file this process wrote with ``contents`` (sorted)."""
        key = contents.column(self.key)
        bounds = pa.concat_arrays(
            [key.slice(0, 1).combine_chunks(), key.slice(len(key) - 1, 1).combine_chunks()]
        )
        handle.file_cache(f"range:{self.key}").put(path, (bounds, contents.num_rows))

    def _stats_bounds(self, actions: pa.Table) -> list[tuple[pa.Array, int] | None] | None:
        """Bounds from the add actions' statistics, where exact (None where not)."""
        t = self.key_type
        names = [f"min.{self.key}", f"max.{self.key}", f"null_count.{self.key}", "num_records"]
        if not all(n in actions.column_names for n in names):
            return None
        exact_type = (
            pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_string(t)
        ) and all(actions.column(n).type == t for n in names[:2])
        if not exact_type:
            return None
        lo, hi, nulls, records = (actions.column(n).combine_chunks() for n in names)
        known = pc.and_(pc.is_valid(nulls), pc.is_valid(records))
        all_null = pc.equal(nulls, records)
        has_bounds = pc.and_(pc.is_valid(lo), pc.is_valid(hi))
        if pa.types.is_string(t):
            # A string statistic of STRING_PREFIX characters may be a truncated one.
            short = pc.and_(
                pc.less(pc.utf8_length(lo), STRING_PREFIX),
                pc.less(pc.utf8_length(hi), STRING_PREFIX),
            )
            has_bounds = pc.and_(has_bounds, pc.fill_null(short, False))
        exact = pc.fill_null(pc.and_(known, pc.or_(all_null, has_bounds)), False).to_numpy(
            zero_copy_only=False
        )
        null = pa.nulls(1, t)
        out: list[tuple[pa.Array, int] | None] = []
        for i in range(len(actions)):
            if not exact[i]:
                out.append(None)
                continue
            count = records[i].as_py()
            if all_null[i].as_py():
                out.append((pa.concat_arrays([null, null]), count))
                continue
            low = null if nulls[i].as_py() else lo.slice(i, 1)
            out.append((pa.concat_arrays([low, hi.slice(i, 1)]), count))
        return out

    def _footer_bounds(self, handle: DeltaTableHandle, path: str) -> tuple[pa.Array, int] | None:
        """Bounds from the file's Parquet statistics, if every row group has them."""
        if pa.types.is_floating(self.key_type):
            return None  # Parquet statistics leave NaN out
        fs, location = handle.file_location(path)
        with _reading(handle, path), fs.open_input_file(location) as f:
            meta = pq.ParquetFile(f).metadata
        column = next(
            (i for i in range(meta.num_columns) if meta.schema.column(i).path == self.key), None
        )
        if column is None:
            return None
        nulls = 0
        values = []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stats = group.column(column).statistics
            if stats is None or not stats.has_null_count:
                return None
            nulls += stats.null_count
            if stats.null_count == group.num_rows:
                continue
            if not stats.has_min_max:
                return None
            values += [stats.min, stats.max]
        try:
            known = pa.array(values, self.key_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return None
        null = pa.nulls(1, self.key_type)
        if not values:
            return pa.concat_arrays([null, null]), meta.num_rows
        extremes = pc.min_max(known)
        low = null if nulls else pa.array([extremes["min"].as_py()], self.key_type)
        high = pa.array([extremes["max"].as_py()], self.key_type)
        return pa.concat_arrays([low, high]), meta.num_rows

    def _read_bounds(self, handle: DeltaTableHandle, path: str) -> tuple[pa.Array, int]:
        fs, location = handle.file_location(path)
        with _reading(handle, path):
            column = pq.read_table(location, filesystem=fs, columns=[self.key]).column(0)
        column = column.cast(self.key_type)
        if len(column) == 0:
            return pa.nulls(2, self.key_type), 0
        order = pc.sort_indices(
            pa.table({"k": column}), sort_keys=[("k", "ascending", "at_start")]
        ).to_numpy()
        return column.take(pa.array([order[0], order[-1]])).combine_chunks(), len(column)

    def _in_key_order(self, ranges: list[FileRange]) -> list[FileRange]:
        if len(ranges) <= 1:
            return ranges
        ranks = dense_ranks(pa.concat_arrays([r.bounds for r in ranges]))
        order = np.lexsort((ranks[1::2], ranks[0::2]))
        return [ranges[i] for i in order]

    # -- planning -------------------------------------------------------------------------

    def plan(self, ranges: Sequence[FileRange], change: ZSet, *, table: str) -> list[Rewrite]:
        """Group the change's rows with the files they touch; ``ranges`` in key order.

        StateError when a removed row's key lies in no file's range (the table cannot
        hold it).
        """
        if len(change) == 0:
            return []
        removing = change.weights < 0
        if not ranges:
            if removing.any():
                raise _absent(table, change.rows, int(np.flatnonzero(removing)[0]))
            return [Rewrite((), change, fill=True)]
        n = len(ranges)
        keys = change.rows.column(self.key).combine_chunks()
        bounds = pa.concat_arrays([r.bounds for r in ranges])
        ranks = dense_ranks(pa.concat_arrays([bounds, keys]))
        low, high, key = ranks[0 : 2 * n : 2], ranks[1 : 2 * n : 2], ranks[2 * n :]
        reach = np.maximum.accumulate(high)
        beyond = ~removing & (key > reach[-1])
        merge_from = n - 1  # the first file the appended rows are rewritten with
        if beyond.any() and self._own_files(ranges[-1], int(beyond.sum())):
            small = self._small_tail(ranges)
            if small < MERGE_FILES:
                rest = np.flatnonzero(~beyond)
                tail = Rewrite((), change.take(np.flatnonzero(beyond)), fill=True)
                return [*self.plan(ranges, change.take(rest), table=table), tail]
            merge_from = n - small
        # Files [first, after) are the ones that may hold the key: lows <= key (a prefix,
        # lows being sorted) minus those whose high and every earlier high are < key.
        after = np.searchsorted(low, key, side="right")
        first = np.searchsorted(reach, key, side="left")
        holds = first < after
        if (removing & ~holds).any():
            raise _absent(table, change.rows, int(np.flatnonzero(removing & ~holds)[0]))
        # An added row goes to the first file holding its key, else to the file before
        # its gap (the first file for keys below every range).
        target = np.where(holds, first, np.maximum(after - 1, 0))
        appends = bool(beyond.any())
        start = np.where(removing, first, np.where(beyond, merge_from, target))
        stop = np.where(removing, after, target + 1)
        # Overlapping [start, stop) intervals are one rewrite.
        order = np.argsort(start, kind="stable")
        s, e = start[order], stop[order]
        reach_end = np.maximum.accumulate(e)
        new_group = np.ones(len(s), dtype=bool)
        new_group[1:] = s[1:] >= reach_end[:-1]
        heads = np.flatnonzero(new_group)
        tails = np.append(heads[1:], len(s))
        rewrites = []
        for h, t in zip(heads, tails, strict=True):
            lo_file, hi_file = int(s[h]), int(reach_end[t - 1])
            rewrites.append(
                Rewrite(
                    tuple(ranges[lo_file:hi_file]),
                    change.take(np.sort(order[h:t])),
                    fill=appends and hi_file == n,
                )
            )
        return rewrites

    def _own_files(self, last: FileRange, appended: int) -> bool:
        """Rows appended beyond the last file go to files of their own when that file
        holds more than four times as many rows (and more than 1/16 of a file); else
        they fill it. A batch appending n rows then rewrites O(n) rows, not a whole
        file, and files at the end grow to several batches' appends (until
        :meth:`_small_tail` finds enough of them to merge)."""
        return last.num_records > max(4 * appended, self.target_file_rows // 16)

    def _small_tail(self, ranges: Sequence[FileRange]) -> int:
        """How many files at the table's end an append would merge with: the last ones
        that hold under half a file's rows each, up to two files' worth of rows (a table
        written before merging existed may end in many)."""
        small = rows = 0
        for r in reversed(ranges):
            rows += r.num_records
            if r.num_records >= self.target_file_rows // 2 or rows > 2 * self.target_file_rows:
                break
            small += 1
        return small

    def streams(self, job: Rewrite) -> bool:
        """Whether :meth:`rewrite` streams ``job``'s files (more rows than
        ``in_memory_rows``) instead of holding them in memory."""
        return sum(f.num_records for f in job.files) > self.in_memory_rows

    def rewrite(self, handle: DeltaTableHandle, job: Rewrite) -> Iterator[pa.Table]:
        """The contents of the files that replace ``job.files`` once its change is applied.

        A group of files holding more than ``in_memory_rows`` rows (a key with very many
        rows, or files written in no key order) is read file by file and re-sorted with
        bounded memory; StateError then comes after the files are read.
        """
        if self.streams(job):
            yield from self.arrange(self._applied(handle, job))
            return
        parts = [self._read(handle, f.path) for f in job.files]
        existing = pa.concat_tables(parts) if parts else self.schema.empty_table()
        updated = apply(existing, job.change, key=self.key, table=handle.path)
        yield from self.split(self.sort(updated), fill=job.fill)

    def _applied(self, handle: DeltaTableHandle, job: Rewrite) -> Iterator[pa.RecordBatch]:
        adds, removes = split_change(job.change)
        owed = -removes.weights
        for f in job.files:
            kept, owed = remove_owed(self._read(handle, f.path), removes, owed, key=self.key)
            yield from kept.to_batches()
        check_nothing_owed(removes, owed, table=handle.path)
        if len(adds):
            yield from adds.expanded().to_batches()

    def _read(self, handle: DeltaTableHandle, path: str) -> pa.Table:
        fs, location = handle.file_location(path)
        with _reading(handle, path):
            data = pq.read_table(location, filesystem=fs)
        return conform_table(data, self.schema)


@contextlib.contextmanager
def _reading(handle: DeltaTableHandle, path: str) -> Iterator[None]:
    """Storage failures, and data files Parquet cannot decode, as one-line StorageErrors."""
    try:
        with translate_errors(handle.path):
            yield
    except pa.ArrowInvalid as e:
        text = " ".join(str(e).split())[:300]
        raise StorageError(
            f"Delta table {handle.path}: data file {path} is unreadable: {text}"
        ) from e


def dense_ranks(values: pa.Array) -> np.ndarray:
    """Dense ranks (int64) in the layout's order: NULLs, NaN, then values ascending."""
    ranks = pc.rank(values, sort_keys=[("", "ascending", "at_start")], tiebreaker="dense")
    return ranks.to_numpy().astype(np.int64)


def run_starts(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Positions where a sorted key column starts a new value (0 included)."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(values)
    if n <= 1:
        return np.zeros(min(n, 1), dtype=np.int64)
    a, b = values.slice(1), values.slice(0, n - 1)
    same = pc.fill_null(pc.equal(a, b), False)
    same = pc.or_(same, pc.and_(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(values.type):
        both_nan = pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False)
        same = pc.or_(same, both_nan)
    changes = np.flatnonzero(~same.to_numpy(zero_copy_only=False)) + 1
    return np.concatenate([[0], changes]).astype(np.int64)


def _cuts(starts: np.ndarray, n: int, target: int, *, fill: bool) -> list[int]:
    """End positions of the files for ``n`` sorted rows whose keys start runs at ``starts``."""
    ends: list[int] = []
    pos = 0
    while n - pos > target:
        limit = pos + target
        if fill:
            want = limit
        else:
            pieces = math.ceil((n - pos) / target)
            want = pos + math.ceil((n - pos) / pieces)
        below = int(np.searchsorted(starts, limit, side="right")) - 1
        if starts[below] <= pos:
            cut = limit  # one key holds more rows than a file: it alone is split
        else:
            j = int(np.searchsorted(starts, want, side="left"))
            options = [
                int(starts[i])
                for i in (j - 1, j)
                if 0 <= i < len(starts) and pos < starts[i] <= limit
            ]
            cut = min(options, key=lambda c: abs(c - want))
        ends.append(cut)
        pos = cut
    ends.append(n)
    return ends


def _absent(table: str, rows: pa.Table, index: int) -> StateError:
    return StateError(
        f"table {table} does not hold a row the job removes ({sample_row(rows, index)}):"
        " it was changed by something else, or the job's state is damaged"
    )


def _orderable(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )
