"""Driver-side parsing of segment files into typed, columnar event batches.

:func:`parse_segments` reads each segment file once, fingerprints the bytes it read,
and parses them with pyarrow (JSON lines through ``pyarrow.json`` over the concatenated
segments, Parquet through ``pyarrow.parquet``) into :data:`CONTROL_SCHEMA` events plus,
per table, the row values as typed Arrow columns. It accepts and rejects exactly what
``format.read_segment`` (the reference path) does, with the same ``BadRecordError``:

- The fast path checks every rule of CONTRACT section 2 that the reference path checks,
  column by column (``_typed``), and checks the bytes for what pyarrow's reader
  forgives (blank lines, two objects on a line, NaN, invalid UTF-8...).
- A segment the fast path rejects, or cannot decide about, is parsed again from the
  same bytes by the reference path, which raises its error or returns its events; those
  are then typed with ``format.values_to_arrow``. Correctness never depends on the fast
  path; speed does. Segments fall back one by one, never a whole batch.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from deltamv.changelog._typed import check_column, parse_type
from deltamv.changelog.events import (
    COMMIT,
    COMMITTED,
    CONTROL_SCHEMA,
    DELETE,
    INITIALIZED,
    PREWRITE,
    PUT,
    RESOLVED,
    RETIRED,
    ROLLBACK,
)
from deltamv.changelog.format import (
    _PARQUET_KINDS,
    _SCAN_DECIMAL,
    _SCAN_FLOAT,
    RowValueError,
    _column_checker,
    _parse_line_slow,
    read_segment,
    read_segment_data,
    rows_to_arrow,
    table_validators,
    values_to_arrow,
)
from deltamv.changelog.segments import Segment
from deltamv.errors import BadRecordError
from deltamv.schema import Column, TableSchema

__all__ = ["CONTROL_SCHEMA", "EventBatch", "ParseStats", "SegmentFingerprint", "parse_segments"]

OLD_PREFIX = "__old_"

_TYPES = [PREWRITE, COMMIT, ROLLBACK, COMMITTED, INITIALIZED, RESOLVED, RETIRED]
_PW, _CM, _RB, _CD, _INIT, _RES = range(6)
_OPS = [PUT, DELETE]
# A key written with an escape sequence: the check for another table's column present
# with null compares key texts, so such keys are left to the reference path.
_ESCAPED_KEY = r'\\.(?:[^"\\]|\\.)*"\s*:'


@dataclass(frozen=True)
class SegmentFingerprint:
    """What was read of one segment: its size and modification time at the read, and
    the blake2b (16-byte) digest of exactly the bytes that were parsed."""

    path: str
    region: int
    seq: int
    size: int
    mtime_ns: int
    digest: str


@dataclass(frozen=True)
class EventBatch:
    """Events of a run of segments, columnar and typed.

    ``events`` has :data:`CONTROL_SCHEMA`, one row per event in input order (segments in
    the order given, lines in file order); its ``file`` column indexes ``files``.
    ``values`` holds, for each declared table with at least one PREWRITE or COMMITTED
    event, one row per such event (PUT and DELETE) in event order: ``row`` (int64, the
    event's index in ``events``), the table's columns typed as ``TableSchema.to_arrow()``
    but nullable (a PUT's value; all null for a DELETE), then ``__old_<c>`` for each
    primary-key column ``c``: its value in the event's ``old_value`` when present and
    valid for the column (the same check as a value's), else null. Tables may be chunked.
    """

    files: tuple[str, ...]
    events: pa.Table
    values: Mapping[str, pa.Table]


@dataclass
class ParseStats:
    """Which path :func:`parse_segments` took, segment by segment (for benchmarks and
    tests; the result never depends on it)."""

    fast_segments: int = 0
    reference_segments: int = 0
    fast_events: int = 0
    reference_events: int = 0
    reference_files: list[str] = dataclasses.field(default_factory=list)

    def count(self, piece: _Piece, reference_file: str | None) -> None:
        if reference_file is None:
            self.fast_segments += piece.count
            self.fast_events += piece.events.num_rows
        else:
            self.reference_segments += 1
            self.reference_events += piece.events.num_rows
            self.reference_files.append(reference_file)


def parse_segments(
    segments: Sequence[Segment],
    tables: Mapping[str, TableSchema],
    primary_keys: Mapping[str, Sequence[str]],
    *,
    stats: ParseStats | None = None,
) -> tuple[EventBatch, list[SegmentFingerprint]]:
    """Parse and validate ``segments`` (in the order given) into one :class:`EventBatch`.

    Each file is read exactly once: the bytes fingerprinted are the bytes parsed.
    Validation is exactly ``format.read_segment``'s: the same records are accepted with
    the same content, and the first bad record of the first bad segment (in input
    order) raises the ``BadRecordError`` the reference path raises for it. Nothing is
    returned for a batch with a bad record. ``primary_keys`` names, per table, the
    columns whose ``old_value`` entries are returned as ``__old_<c>`` (tables missing
    from it get none). Memory is proportional to the bytes read. Single-threaded.
    ``stats``, when given, is filled in with the path each segment took.
    """
    plan = _plan(tuple(tables.items()), tuple((t, tuple(c)) for t, c in primary_keys.items()))
    shared, loaded = _load(segments, plan)
    pieces: dict[int, _Piece] = {}
    if plan.fast:
        for piece in _fast_jsonl(plan, shared, loaded):
            pieces[piece.first] = piece
        for item in loaded:
            if item.data is not None and item.segment.fmt == "parquet":
                found = _fast_parquet(plan, item)
                if found is not None:
                    pieces[item.index] = found
    # The reference path for everything else, in input order: its first error is the
    # first bad record of the first bad segment (the fast path accepts only good ones).
    i = 0
    ordered: list[_Piece] = []
    while i < len(segments):
        fast = pieces.get(i)
        piece = fast if fast is not None else _reference_piece(plan, loaded[i])
        if stats is not None:
            stats.count(piece, segments[i].path if fast is None else None)
        ordered.append(piece)
        i += piece.count
    fingerprints = [item.fingerprint for item in loaded if item.fingerprint is not None]
    return _assemble(tuple(s.path for s in segments), ordered), fingerprints


# ---------------------------------------------------------------------------
# The tables: parse types, shared column names


@dataclass(frozen=True)
class _TablePlan:
    name: str
    schema: TableSchema
    nullable: TableSchema  # every column nullable: how values leave
    primary_key: tuple[Column, ...]
    others: tuple[str, ...]  # columns other tables declare and this one does not
    values_schema: pa.Schema


@dataclass(frozen=True)
class _Plan:
    tables: dict[str, _TablePlan]
    names: pa.Array  # table names, for index_in
    union: dict[str, pa.DataType]  # every declared column name -> its parse type
    fast: bool  # False when two tables' columns of one name have different parse types
    decimals: bool
    foreign: bool  # some table lacks a column another declares (see _present_null)
    json_schema: pa.Schema
    validators: Mapping[str, Any]

    @classmethod
    def of(
        cls, tables: Mapping[str, TableSchema], primary_keys: Mapping[str, Sequence[str]]
    ) -> _Plan:
        union: dict[str, pa.DataType] = {}
        scales: dict[str, int] = {}
        fast = bool(tables)
        for schema in tables.values():
            for col in schema.columns:
                if col.kind == "decimal":
                    scales[col.name] = max(scales.get(col.name, 0), col.scale)
        for schema in tables.values():
            for col in schema.columns:
                t = parse_type(col, scales.get(col.name))
                if union.setdefault(col.name, t) != t:
                    fast = False  # the reference path handles such clashes, slowly
        plans = {}
        for name, schema in tables.items():
            pk = []
            for c in primary_keys.get(name, ()):
                key = schema.column(c)
                if key is None:
                    raise ValueError(f"table {name!r}: primary-key column {c!r} is not declared")
                pk.append(dataclasses.replace(key, nullable=True))
            nullable = TableSchema(
                tuple(dataclasses.replace(c, nullable=True) for c in schema.columns)
            )
            values_schema = pa.schema(
                [
                    pa.field("row", pa.int64(), nullable=False),
                    *nullable.to_arrow(),
                    *(pa.field(OLD_PREFIX + c.name, c.arrow_type()) for c in pk),
                ]
            )
            others = tuple(c for c in union if schema.column(c) is None)
            plans[name] = _TablePlan(name, schema, nullable, tuple(pk), others, values_schema)
        row = pa.struct([pa.field(c, t) for c, t in union.items()])
        json_schema = pa.schema(
            [
                ("region", pa.int64()),
                ("type", pa.string()),
                ("start_ts", pa.int64()),
                ("commit_ts", pa.int64()),
                ("ts", pa.int64()),
                ("table", pa.string()),
                ("key", pa.string()),
                ("op", pa.string()),
                ("value", row),
                ("old_value", row),
                ("start_key", pa.string()),
                ("end_key", pa.string()),
                ("parents", pa.list_(pa.int64())),
                ("primary", pa.string()),
                ("large", pa.bool_()),
            ]
        )
        return cls(
            plans,
            pa.array(list(tables), pa.string()),
            union,
            fast,
            bool(scales),
            any(p.others for p in plans.values()),
            json_schema,
            table_validators(tables),
        )


@functools.lru_cache(maxsize=8)
def _plan(
    tables: tuple[tuple[str, TableSchema], ...],
    primary_keys: tuple[tuple[str, tuple[str, ...]], ...],
) -> _Plan:
    return _Plan.of(dict(tables), dict(primary_keys))


# ---------------------------------------------------------------------------
# Reading


@dataclass
class _Loaded:
    """One segment as read: its bytes, or the error that stopped the read."""

    index: int
    segment: Segment
    data: bytes | memoryview | None = None
    fingerprint: SegmentFingerprint | None = None
    error: OSError | None = None
    start: int = -1  # where ``data`` sits in the shared JSONL buffer; -1: elsewhere
    end: int = -1  # the end of what the JSON reader sees: data, plus a newline if it lacks one
    screen: _Screen | None = None  # the JSONL prescreen's verdict; None: not for the fast path


def _load(segments: Sequence[Segment], plan: _Plan) -> tuple[bytearray, list[_Loaded]]:
    """Read every segment once, fingerprinting the bytes read.

    JSONL segments are read straight into one shared buffer, one after the other (with
    a newline after a file whose last line has none), so that runs of them can be
    parsed without copying; the sizes that buffer is planned with come from a stat
    before the read, and a file whose size changed in between gets its own buffer.
    Each is prescreened right after its read, while its bytes are in the cache.
    """
    planned = [_planned_size(s) for s in segments]
    shared = bytearray(sum(planned) + len(segments))
    view = memoryview(shared)
    offset = 0
    loaded = []
    for i, segment in enumerate(segments):
        item = _Loaded(i, segment)
        loaded.append(item)
        try:
            with open(segment.path, "rb") as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                if segment.fmt != "jsonl" or size != planned[i]:
                    item.data = f.read()
                else:
                    got = f.readinto(view[offset : offset + size])
                    tail = f.read(1)
                    if got != size or tail:  # changed while read: not in the shared buffer
                        item.data = bytes(view[offset : offset + got]) + tail + f.read()
                    else:
                        item.data = view[offset : offset + size]
                        item.start, item.end = offset, offset + size
                        if size and shared[offset + size - 1] != 10:
                            shared[offset + size] = 10
                            item.end += 1
                        offset = item.end
                        if plan.fast:
                            item.screen = _prescreen(
                                shared,
                                item.start,
                                item.end,
                                decimals=plan.decimals,
                                nulls=plan.foreign,
                            )
        except OSError as e:
            item.error = e
            continue
        digest = hashlib.blake2b(item.data, digest_size=16).hexdigest()
        item.fingerprint = SegmentFingerprint(
            segment.path, segment.region, segment.seq, len(item.data), st.st_mtime_ns, digest
        )
    return shared, loaded


def _planned_size(segment: Segment) -> int:
    if segment.fmt != "jsonl":
        return 0
    try:
        return os.stat(segment.path).st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class _Piece:
    """The output of ``count`` consecutive input segments from ``first``; ``row`` in
    ``values`` counts from this piece's first event."""

    first: int
    count: int
    events: pa.Table
    values: dict[str, pa.Table]


# ---------------------------------------------------------------------------
# JSON lines, fast


@dataclass(frozen=True)
class _Screen:
    """What the prescreen found in a JSONL segment it lets through."""

    newlines: np.ndarray  # positions of its newlines, from its start
    has_null: bool  # the bytes "null" occur in it (see _present_null)


@dataclass
class _Candidate:
    """A segment for the fast path and its line count (one row per line)."""

    item: _Loaded
    lines: int
    screen: _Screen | None = None


_GROUP_BYTES = 4 << 20  # bytes per pyarrow.json call: cache-friendly, bounded tables
_MAX_DEPTH = 200


def _fast_jsonl(plan: _Plan, shared: bytearray, loaded: Sequence[_Loaded]) -> Iterator[_Piece]:
    """Pieces for the JSONL segments the fast path accepts (the others are left out)."""
    runs: list[list[_Candidate]] = []
    previous: _Candidate | None = None
    for item in loaded:
        if item.screen is None:
            continue
        c = _Candidate(item, len(item.screen.newlines), item.screen)
        # Parse groups: consecutive segments, adjacent in the buffer, ~_GROUP_BYTES each.
        if (
            previous is None
            or previous.item.index + 1 != item.index
            or previous.item.end != item.start
            or runs[-1][-1].item.end - runs[-1][0].item.start >= _GROUP_BYTES
        ):
            runs.append([])
        runs[-1].append(c)
        previous = c
    for run in runs:
        yield from _parse_run(plan, shared, run)


def _parse_run(plan: _Plan, shared: bytearray, group: list[_Candidate]) -> Iterator[_Piece]:
    """Parse adjacent segments in one call; halve the group when pyarrow refuses it."""
    lines = sum(c.lines for c in group)
    if lines == 0:
        for c in group:
            yield _Piece(c.item.index, 1, CONTROL_SCHEMA.empty_table(), {})
        return
    begin, end = group[0].item.start, group[-1].item.end
    table = _read_json(pa.py_buffer(shared).slice(begin, end - begin), plan.json_schema)
    if table is not None and table.num_rows == lines:
        # Each line starts with "{" and ends with "}" (the prescreen), so every newline
        # lies between top-level values: as many rows as lines means one object per
        # line, and row i of a segment is its line i + 1.
        yield from _check_group(plan, group, table, _JsonlSource(shared, group))
    elif len(group) > 1:
        mid = len(group) // 2
        yield from _parse_run(plan, shared, group[:mid])
        yield from _parse_run(plan, shared, group[mid:])


def _prescreen(
    shared: bytearray, start: int, end: int, *, decimals: bool, nulls: bool
) -> _Screen | None:
    """A segment's newlines (its bytes end with one), when each of its lines looks like
    one JSON object: valid UTF-8, first and last non-blank bytes ``{`` and ``}``, no
    deep nesting, no decimal text pyarrow reads otherwise. None: the reference path."""
    if start == end:
        return _Screen(np.zeros(0, np.int64), False)
    view = memoryview(shared)[start:end]
    try:
        codecs.utf_8_decode(view, "strict", True)
    except UnicodeDecodeError:
        return None
    a = np.frombuffer(shared, np.uint8, end - start, start)
    nl = np.flatnonzero(a == 10)
    tight = a[0] == 123 and (a[nl - 1] == 125).all() and (a[nl[:-1] + 1] == 123).all()
    if not tight and not _loose_lines(view):
        return None
    if decimals:
        # pyarrow reads the decimal string "1e+-2" as 0.01; Python's rules refuse it.
        plus = np.flatnonzero(a == 43)
        if len(plus) and (a[plus + 1] == 45).any():
            return None
    # pyarrow crashes the process on JSON nested some 10,000 deep (Python's json stops
    # near 1,000 with RecursionError): a line with more brackets than _MAX_DEPTH goes
    # to the reference path. A line shorter than twice that cannot nest deeper.
    if nl[0] > 2 * _MAX_DEPTH or (len(nl) > 1 and (nl[1:] - nl[:-1]).max() > 2 * _MAX_DEPTH):
        ends = nl + start
        for k in np.flatnonzero(np.diff(nl, prepend=-1) > 2 * _MAX_DEPTH):
            b, e = (int(ends[k - 1]) + 1 if k else start), int(ends[k])
            if shared.count(b"[", b, e) + shared.count(b"{", b, e) > _MAX_DEPTH:
                return None
    has_null = nulls and _NULL.search(shared, start, end) is not None
    return _Screen(nl, has_null)


_BAD_START = re.compile(rb"(?:\A|\n)[ \t\r]*(?:[^{ \t\r]|\Z)")
_BAD_END = re.compile(rb"[^} \t\r\n][ \t\r]*\n")
_NULL = re.compile(rb"null")


def _loose_lines(data: memoryview) -> bool:
    """Every line of ``data`` (ending with a newline) starts with ``{`` and ends with
    ``}`` up to JSON whitespace (spaces, tabs, carriage returns)."""
    return _BAD_START.search(data, 0, len(data) - 1) is None and _BAD_END.search(data) is None


def _read_json(buffer: pa.Buffer, schema: pa.Schema) -> pa.Table | None:
    """pyarrow's JSON reader over ``buffer``; None when it refuses the bytes."""
    block = max(1 << 20, min(buffer.size + 1, 1 << 28))
    try:
        return pj.read_json(
            pa.BufferReader(buffer),
            read_options=pj.ReadOptions(use_threads=False, block_size=block),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
    except (pa.ArrowException, ValueError):
        return None


class _JsonlSource:
    """The bytes behind one parsed group of JSONL segments (see _check_group)."""

    def __init__(self, shared: bytearray, group: Sequence[_Candidate]) -> None:
        self.shared, self.group = shared, group
        self.begin, self.end = group[0].item.start, group[-1].item.end
        self._lines: pa.Array | None = None

    def texts(self, rows: np.ndarray) -> pa.Array:
        """The text of the given lines (rows of the group)."""
        if self._lines is None:
            offsets = np.concatenate(
                [np.zeros(1, np.int64)]
                + [
                    c.screen.newlines + (c.item.start - self.begin + 1)
                    for c in self.group
                    if c.screen
                ]
            )
            data = pa.py_buffer(self.shared).slice(self.begin, self.end - self.begin)
            self._lines = pa.Array.from_buffers(
                pa.large_string(), len(offsets) - 1, [None, pa.py_buffer(offsets), data]
            )
        return self._lines.take(pa.array(rows))

    def has_null(self) -> bool:
        return any(c.screen is not None and c.screen.has_null for c in self.group)

    def contains(self, needle: bytes) -> np.ndarray:
        """Per segment of the group: whether its bytes contain ``needle``."""
        return np.array(
            [self.shared.find(needle, c.item.start, c.item.end) >= 0 for c in self.group]
        )


# ---------------------------------------------------------------------------
# The checks, vectorised


class _Source:
    """What the checks may ask about the bytes behind a group (see _JsonlSource)."""

    texts: Callable[[np.ndarray], pa.Array]
    has_null: Callable[[], bool]
    contains: Callable[[bytes], np.ndarray]


def _check_group(
    plan: _Plan, group: Sequence[_Candidate], table: pa.Table, source: Any
) -> Iterator[_Piece]:
    """Validate a parsed group; yield pieces for its segments without a bad or
    undecided row (consecutive ones as one piece)."""
    n = table.num_rows
    seg_rows = np.array([c.lines for c in group], np.int64)
    seg_of_row = np.repeat(np.arange(len(group)), seg_rows)
    reject = np.zeros(n, dtype=bool)
    seg_reject = np.zeros(len(group), dtype=bool)
    col = _Columns(table)

    code = col.codes("type", _TYPES)
    is_pw, is_cd, is_init, is_res = code == _PW, code == _CD, code == _INIT, code == _RES
    has_commit = (code == _CM) | is_cd
    row_type = (code >= 0) & (code <= _CD)
    has_op = is_pw | is_cd
    reject |= code < 0

    region, region_ok = col.ints("region")
    expected = np.repeat(np.array([c.item.segment.region for c in group], np.int64), seg_rows)
    reject |= ~region_ok | (region != expected)
    ts, ts_ok = col.ints("ts")
    reject |= is_res & (~ts_ok | (ts < 0))
    start_ts, start_ok = col.ints("start_ts")
    reject |= row_type & (~start_ok | (start_ts < 0))
    commit_ts, commit_ok = col.ints("commit_ts")
    reject |= has_commit & (~commit_ok | (commit_ts < 0) | (commit_ts <= start_ts))
    tcode = col.codes("table", plan.names)
    reject |= row_type & ((tcode < 0) | ~col.valid("key"))
    ocode = col.codes("op", _OPS)
    reject |= has_op & (ocode < 0)
    put = has_op & (ocode == 0)
    value = col.array("value")
    reject |= put & ~_valid(value)
    reject |= is_init & ~(col.valid("start_key") & col.valid("end_key"))
    reject |= is_init & _bad_parents(col.array("parents"))
    for field in table.schema:
        if _has_float(field.type):
            reject |= _nonfinite_rows(col.array(field.name))

    # Columns pyarrow met in a value that no table declares: a PUT naming one is bad
    # (even with null), which only the reference path can pin down.
    extra = [f.name for f in value.type if f.name not in plan.union]
    for name in extra:
        needle = json.dumps(name, ensure_ascii=False).encode()
        found = source.contains(needle)
        seg_reject |= found if found.any() else True

    values_flat = _children(value)
    valid_flat = {name: _valid(child) for name, child in values_flat.items()}
    old_flat = _children(col.array("old_value"))
    values: dict[str, tuple[np.ndarray, list[pa.Array]]] = {}
    for t, tp in enumerate(plan.tables.values()):
        rows = np.flatnonzero(has_op & (tcode == t))
        if not len(rows):
            continue
        take = pa.array(rows)
        put_t = put[rows]
        arrays: list[pa.Array] = [pa.array(rows, pa.int64())]
        deletes = ~put_t
        for column in tp.schema.columns:
            child = values_flat[column.name].take(take)
            present = _valid(child)
            if (deletes & present).any():
                child = _nulled(child, deletes)  # a DELETE's value is ignored
                present &= put_t
            checked = check_column(child, column)
            reject[rows[checked.bad | checked.undecided]] = True
            if not column.nullable:
                reject[rows[put_t & ~present]] = True
            arrays.append(checked.values)
        for other in tp.others:
            reject[rows[put_t & valid_flat[other][rows]]] = True
        if tp.others and put_t.any() and source.has_null():
            put_rows = rows[put_t]
            reject[put_rows[_present_null(source.texts(put_rows), tp.others)]] = True
        for column in tp.primary_key:
            checked = check_column(old_flat[column.name].take(take), column)
            reject[rows[checked.undecided]] = True  # a bad old value is just unknown
            arrays.append(checked.values)
        values[tp.name] = (rows, arrays)

    seg_reject[np.unique(seg_of_row[reject])] = True
    if seg_reject.all():
        return

    row_start = np.zeros(len(group) + 1, np.int64)
    np.cumsum(seg_rows, out=row_start[1:])
    line = np.arange(n, dtype=np.int64) - np.repeat(row_start[:-1], seg_rows) + 1
    files = np.repeat(np.array([c.item.index for c in group], np.int32), seg_rows)
    seqs = np.repeat(np.array([c.item.segment.seq for c in group], np.int64), seg_rows)
    events = pa.Table.from_arrays(
        [
            pa.array(files),
            pa.array(line),
            pa.array(expected),
            pa.array(seqs),
            col.array("type"),
            _masked(col.array("start_ts"), row_type),
            _masked(col.array("commit_ts"), has_commit),
            _masked(col.array("ts"), is_res),
            _masked(col.array("table"), row_type),
            _masked(col.array("key"), row_type),
            _masked(col.array("op"), has_op),
            _masked(col.array("start_key"), is_init),
            _masked(col.array("end_key"), is_init),
            _masked(col.array("parents"), is_init),
            _masked(col.array("primary"), is_pw),
            _masked(col.array("large"), is_pw),
        ],
        schema=CONTROL_SCHEMA,
    )
    tables = {
        name: (rows, pa.Table.from_arrays(arrays, schema=plan.tables[name].values_schema))
        for name, (rows, arrays) in values.items()
    }
    # One piece per run of accepted segments.
    k = 0
    while k < len(group):
        if seg_reject[k]:
            k += 1
            continue
        j = k
        while j < len(group) and not seg_reject[j]:
            j += 1
        lo, hi = int(row_start[k]), int(row_start[j])
        piece_values = {}
        for name, (rows, vt) in tables.items():
            a, b = np.searchsorted(rows, [lo, hi])
            if b > a:
                piece_values[name] = _rebase(vt.slice(a, b - a), -lo)
        yield _Piece(group[k].item.index, j - k, events.slice(lo, hi - lo), piece_values)
        k = j


class _Columns:
    """The columns of a parsed table, as single arrays, with numpy views of some."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.n = table.num_rows

    def array(self, name: str) -> pa.Array:
        column = self.table.column(name)
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

    def valid(self, name: str) -> np.ndarray:
        return _valid(self.array(name))

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The values (0 where null) and whether each is present."""
        arr = self.array(name)
        valid = _valid(arr)
        if arr.null_count:
            arr = pc.fill_null(arr, 0)
        return np.asarray(arr.to_numpy(zero_copy_only=False), np.int64), valid

    def codes(self, name: str, values: Sequence[str] | pa.Array) -> np.ndarray:
        """The index of each string in ``values``; -1 for null or any other string."""
        codes = pc.index_in(self.array(name), value_set=pa.array(values, pa.string()))
        return np.asarray(pc.fill_null(codes, -1).to_numpy(zero_copy_only=False), np.int64)


def _np_mask(mask: pa.Array) -> np.ndarray:
    """A boolean array as numpy, null as False."""
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _children(struct: pa.Array) -> dict[str, pa.Array]:
    """A struct array's fields, with the struct's own nulls applied to them."""
    return {f.name: child for f, child in zip(struct.type, struct.flatten(), strict=True)}


def _nulled(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    if not mask.any():
        return arr
    return pc.if_else(pa.array(~mask), arr, pa.scalar(None, arr.type))


def _masked(arr: pa.Array, keep: np.ndarray) -> pa.Array:
    """``arr`` with null wherever ``keep`` is false (fields an event type does not use)."""
    if arr.null_count == len(arr) or not (_valid(arr) & ~keep).any():
        return arr
    return pc.if_else(pa.array(keep), arr, pa.scalar(None, arr.type))


def _bad_parents(parents: pa.Array) -> np.ndarray:
    """Rows whose ``parents`` list holds a null or a negative id."""
    bad = np.zeros(len(parents), dtype=bool)
    if parents.null_count == len(parents):
        return bad
    items = parents.flatten()
    wrong = ~_valid(items) | (np.asarray(pc.fill_null(items, 0), np.int64) < 0)
    if wrong.any():
        owners = np.asarray(pc.list_parent_indices(parents), np.int64)
        bad[owners[wrong]] = True
    return bad


def _has_float(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_float(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_float(t.value_type)
    return False


def _nonfinite_rows(arr: pa.Array) -> np.ndarray:
    """Rows holding NaN or an infinity anywhere (pyarrow reads the literals NaN,
    Infinity and -Infinity that the reference path refuses as not JSON)."""
    rows = np.zeros(len(arr), dtype=bool)
    t = arr.type
    if not _has_float(t):
        return rows
    if pa.types.is_floating(t):
        return _valid(arr) & ~np.asarray(
            pc.fill_null(pc.is_finite(arr), True).to_numpy(zero_copy_only=False), dtype=bool
        )
    if pa.types.is_struct(t):
        for child in arr.flatten():
            rows |= _nonfinite_rows(child)
        return rows
    inner = _nonfinite_rows(arr.flatten())
    if inner.any():
        rows[np.asarray(pc.list_parent_indices(arr), np.int64)[inner]] = True
    return rows


def _present_null(texts: pa.Array, names: Sequence[str]) -> np.ndarray:
    """Which texts may name one of ``names`` as a key with a null value.

    pyarrow cannot tell a null from an absent column, yet the reference path rejects a
    PUT naming another table's column even with null. Conservative: a match may be a
    false alarm (the text in a string), never a miss (a key with an escape sequence is
    always a match).
    """
    has_null = _np_mask(pc.match_substring(texts, "null"))
    hits = np.zeros(len(texts), dtype=bool)
    if not has_null.any():
        return hits
    idx = np.flatnonzero(has_null)
    sub = texts.take(pa.array(idx))
    keys = "|".join(_re2_literal(json.dumps(n, ensure_ascii=False)[1:-1]) for n in names)
    named = pc.match_substring_regex(sub, f'"(?:{keys})"\\s*:\\s*null')
    escaped = pc.match_substring_regex(sub, _ESCAPED_KEY)
    hits[idx] = _np_mask(pc.or_(named, escaped))
    return hits


def _re2_literal(text: str) -> str:
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in text)


def _rebase(values: pa.Table, shift: int) -> pa.Table:
    if shift == 0:
        return values
    row = pc.add(values.column("row"), pa.scalar(shift, pa.int64()))
    return values.set_column(0, values.schema.field(0), row)


# ---------------------------------------------------------------------------
# Parquet, fast


def _fast_parquet(plan: _Plan, item: _Loaded) -> _Piece | None:
    """The piece for a Parquet segment the fast path accepts, else None.

    The top-level columns are checked as the reference path checks them (present,
    of an accepted type) and widened to the JSON reader's types; JSON-text ``value`` and
    ``old_value`` columns are parsed by pyarrow's JSON reader, one text per line. A
    struct-typed ``value`` or ``old_value`` is left to the reference path.
    """
    assert item.data is not None
    try:
        table = pq.read_table(pa.BufferReader(item.data))
    except (OSError, pa.ArrowException):
        return None
    names = set(table.column_names)
    if not {"region", "type"} <= names:
        return None
    n = table.num_rows
    columns: dict[str, pa.Array] = {}
    texts: dict[str, pa.Array] = {}
    try:
        for field in plan.json_schema:
            if field.name not in names:
                columns[field.name] = pa.nulls(n, field.type)
                continue
            column = table.column(field.name)
            column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            if not _PARQUET_KINDS[field.name](column.type):
                return None
            if field.name in ("value", "old_value"):
                if pa.types.is_struct(column.type):
                    return None
                column = column.cast(pa.string())
                column.validate(full=True)  # UTF-8
                texts[field.name] = column
                parsed = _parse_texts(plan, column, field.type)
                if parsed is None:
                    return None
                column = parsed
            else:
                column = column.cast(field.type)  # safe: an unsigned id above 2**63 fails
            columns[field.name] = column
    except (pa.ArrowException, ValueError):
        return None
    raw = pa.Table.from_arrays(list(columns.values()), names=list(columns))
    candidate = _Candidate(item, n)
    pieces = list(_check_group(plan, [candidate], raw, _ParquetSource(texts)))
    return pieces[0] if pieces else None


def _parse_texts(plan: _Plan, texts: pa.Array, row_type: pa.DataType) -> pa.Array | None:
    """JSON object texts (null stays null) as a struct array of ``row_type``'s fields."""
    n = len(texts)
    filled = pc.fill_null(texts, "{}")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), filled), "\n")
    data = bytearray(joined[0].as_buffer().to_pybytes() + b"\n" if n else b"")
    screen = _prescreen(data, 0, len(data), decimals=plan.decimals, nulls=False)
    if screen is None or len(screen.newlines) != n:
        return None  # a text that is not one JSON object on one line
    if n == 0:
        return pa.nulls(0, row_type)
    parsed = _read_json(pa.py_buffer(data), pa.schema(list(row_type)))
    if parsed is None or parsed.num_rows != n:
        return None
    children = [c.combine_chunks() for c in parsed.columns]
    return pa.StructArray.from_arrays(children, fields=list(parsed.schema), mask=pc.is_null(texts))


class _ParquetSource:
    """The JSON texts behind one Parquet segment's values (see _check_group)."""

    def __init__(self, texts: Mapping[str, pa.Array]) -> None:
        self.values = texts.get("value")
        self.all = [t for t in texts.values()]

    def texts(self, rows: np.ndarray) -> pa.Array:
        assert self.values is not None
        return self.values.take(pa.array(rows))

    def has_null(self) -> bool:
        return any(pc.any(pc.match_substring(t, "null")).as_py() for t in self.all)

    def contains(self, needle: bytes) -> np.ndarray:
        text = needle.decode()
        return np.array([any(pc.any(pc.match_substring(t, text)).as_py() for t in self.all)])


# ---------------------------------------------------------------------------
# Rows of one table (snapshot files)


def _table_rows(data: bytearray, schema: TableSchema) -> pa.Table | None:
    """One table's rows from JSON lines (``data`` ends with a newline), typed as
    ``schema.to_arrow()``, when the fast path vouches that ``format``'s validator and
    ``rows_to_arrow`` give exactly these rows; None when it cannot (the caller then asks
    the reference path, which also names any bad record)."""
    decimals = any(c.kind == "decimal" for c in schema.columns)
    screen = _prescreen(data, 0, len(data), decimals=decimals, nulls=False)
    if screen is None:
        return None
    n = len(screen.newlines)
    target = schema.to_arrow()
    if n == 0:
        return target.empty_table()
    json_schema = pa.schema([(c.name, parse_type(c)) for c in schema.columns])
    parsed = _read_json(pa.py_buffer(data), json_schema)
    # A column pyarrow had to infer is one the table does not declare: an error (even
    # with null), for the reference path to name.
    if parsed is None or parsed.num_rows != n or parsed.schema.names != json_schema.names:
        return None
    arrays = []
    for col, column in zip(schema.columns, parsed.columns, strict=True):
        arr = column.combine_chunks()
        checked = check_column(arr, col)
        if checked.bad.any() or checked.undecided.any() or (not col.nullable and arr.null_count):
            return None
        arrays.append(checked.values)
    return pa.Table.from_arrays(arrays, schema=target)


# ---------------------------------------------------------------------------
# The reference path


def _reference_piece(plan: _Plan, item: _Loaded) -> _Piece:
    """The segment through ``format``'s reference path (raising its BadRecordError)."""
    segment, index = item.segment, item.index
    if item.data is None:
        read_segment(segment, plan.validators)  # raises its own "cannot read" error
        assert item.error is not None
        error = item.error
        raise BadRecordError(segment.path, None, f"cannot read file: {error.strerror or error}")
    data = bytes(item.data)
    try:
        table = read_segment_data(segment, data, plan.validators)
    except BadRecordError as e:
        if segment.fmt == "parquet" and e.line is None:
            read_segment(segment, plan.validators)  # the same error, naming the path
        raise
    n = table.num_rows
    events = pa.Table.from_arrays(
        [
            pa.array(np.full(n, index, np.int32)),
            table.column("line"),
            table.column("region"),
            table.column("seq"),
            *(table.column(f.name) for f in CONTROL_SCHEMA if f.name not in _POSITION),
        ],
        schema=CONTROL_SCHEMA,
    )
    types = table.column("type").to_pylist()
    names = table.column("table").to_pylist()
    olds = table.column("old_value").to_pylist()
    texts = table.column("value").to_pylist()
    raw_old = _RawOld(segment, data, plan) if any(o is not None for o in olds) else None
    values: dict[str, pa.Table] = {}
    for name, tp in plan.tables.items():
        rows = [i for i in range(n) if types[i] in (PREWRITE, COMMITTED) and names[i] == name]
        if not rows:
            continue
        typed = values_to_arrow([texts[i] for i in rows], tp.nullable)
        arrays = [pa.array(rows, pa.int64()), *typed.columns]
        for column in tp.primary_key:
            check = _column_checker(column)
            old_values: list[Any] = []
            for i in rows:
                v = raw_old.get(i, column.name) if raw_old is not None and olds[i] else None
                try:
                    old_values.append(None if v is None else check(v))
                except RowValueError:
                    old_values.append(None)
            one = TableSchema((column,))
            arrays.append(rows_to_arrow([{column.name: v} for v in old_values], one).column(0))
        values[name] = pa.Table.from_arrays(arrays, schema=tp.values_schema)
    return _Piece(index, 1, events, values)


_POSITION = frozenset({"file", "line", "region", "seq"})


class _RawOld:
    """The ``old_value`` objects of a segment's records as parsed (for ``__old_``)."""

    def __init__(self, segment: Segment, data: bytes, plan: _Plan) -> None:
        self.scan = _SCAN_DECIMAL if plan.decimals else _SCAN_FLOAT
        self.segment = segment
        self.lines: list[str] = []
        self.column: pa.Array | None = None
        if segment.fmt == "jsonl":
            self.lines = data.decode("utf-8").split("\n")
        else:
            self.column = pq.read_table(pa.BufferReader(data), columns=["old_value"]).column(0)

    def get(self, row: int, name: str) -> Any:
        if self.column is None:
            record = _parse_line_slow(self.lines[row], self.scan)
            old = record.get("old_value") if type(record) is dict else None
        else:
            old = self.column[row].as_py()
            if isinstance(old, str):
                old = _parse_line_slow(old, self.scan)
        return old.get(name) if type(old) is dict else None


# ---------------------------------------------------------------------------
# Putting the pieces together


def _assemble(files: tuple[str, ...], pieces: list[_Piece]) -> EventBatch:
    offset = 0
    events = []
    values: dict[str, list[pa.Table]] = {}
    for piece in pieces:
        events.append(piece.events)
        for name, vt in piece.values.items():
            values.setdefault(name, []).append(_rebase(vt, offset))
        offset += piece.events.num_rows
    return EventBatch(
        files,
        pa.concat_tables(events) if events else CONTROL_SCHEMA.empty_table(),
        {name: pa.concat_tables(parts) for name, parts in values.items()},
    )
