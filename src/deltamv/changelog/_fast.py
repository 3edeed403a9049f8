"""The fast path: pyarrow parses, numpy and pyarrow.compute check (see ``batch``).

Everything here either vouches for a segment (its events and typed values are exactly
what the reference path gives) or leaves it out, and the caller sends it to the
reference path. A ``Piece`` is the output of consecutive accepted segments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from deltamv.changelog._plan import Plan
from deltamv.changelog._read import Loaded, Screen, prescreen
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
from deltamv.changelog.format import _PARQUET_KINDS
from deltamv.schema import TableSchema

__all__ = ["Piece", "fast_jsonl", "fast_parquet", "rebase", "table_rows"]

_TYPES = [PREWRITE, COMMIT, ROLLBACK, COMMITTED, INITIALIZED, RESOLVED, RETIRED]
_PW, _CM, _RB, _CD, _INIT, _RES = range(6)
_OPS = [PUT, DELETE]
# A key written with an escape sequence: the check for another table's column present
# with null compares key texts, so such keys are left to the reference path.
_ESCAPED_KEY = r'\\.(?:[^"\\]|\\.)*"\s*:'


@dataclass(frozen=True)
class Piece:
    """The output of ``count`` consecutive input segments from ``first``; ``row`` in
    ``values`` counts from this piece's first event."""

    first: int
    count: int
    events: pa.Table
    values: dict[str, pa.Table]


# ---------------------------------------------------------------------------
# JSON lines


@dataclass
class _Candidate:
    """A segment for the fast path and its line count (one row per line)."""

    item: Loaded
    lines: int
    screen: Screen | None = None


_GROUP_BYTES = 4 << 20  # bytes per pyarrow.json call: cache-friendly, bounded tables


def fast_jsonl(plan: Plan, shared: bytearray, loaded: Sequence[Loaded]) -> Iterator[Piece]:
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


def _parse_run(plan: Plan, shared: bytearray, group: list[_Candidate]) -> Iterator[Piece]:
    """Parse adjacent segments in one call; halve the group when pyarrow refuses it."""
    lines = sum(c.lines for c in group)
    if lines == 0:
        for c in group:
            yield Piece(c.item.index, 1, CONTROL_SCHEMA.empty_table(), {})
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


def _read_json(buffer: pa.Buffer, schema: pa.Schema) -> pa.Table | None:
    """pyarrow's JSON reader over ``buffer``; None when it refuses the bytes. A buffer
    larger than a block is parsed in blocks on pyarrow's threads (1.5x faster on two
    cores); if that fails (a line longer than a block), as one block."""
    if buffer.size > _BLOCK_BYTES:
        table = _read_json_blocks(buffer, schema, _BLOCK_BYTES, threads=True)
        if table is not None:
            return table
    block = max(1 << 20, min(buffer.size + 1, 1 << 28))
    return _read_json_blocks(buffer, schema, block, threads=False)


_BLOCK_BYTES = 1 << 20


def _read_json_blocks(
    buffer: pa.Buffer, schema: pa.Schema, block: int, *, threads: bool
) -> pa.Table | None:
    try:
        return pj.read_json(
            pa.BufferReader(buffer),
            read_options=pj.ReadOptions(use_threads=threads, block_size=block),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
    except (pa.ArrowException, ValueError):
        return None


class _JsonlSource:
    """The bytes behind one parsed group of JSONL segments."""

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


class _Source(Protocol):
    """What the checks may ask about the bytes behind a parsed group."""

    def texts(self, rows: np.ndarray) -> pa.Array:
        """The JSON text holding each given row's value (the line, in JSONL)."""
        ...

    def has_null(self) -> bool:
        """Whether the bytes "null" occur anywhere behind the group."""
        ...

    def contains(self, needle: bytes) -> np.ndarray:
        """Per segment of the group: whether its bytes contain ``needle``."""
        ...


def _check_group(
    plan: Plan, group: Sequence[_Candidate], table: pa.Table, source: _Source
) -> Iterator[Piece]:
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
                piece_values[name] = rebase(vt.slice(a, b - a), -lo)
        yield Piece(group[k].item.index, j - k, events.slice(lo, hi - lo), piece_values)
        k = j


class _Columns:
    """The columns of a parsed table, as single arrays, with numpy views of some."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.n = table.num_rows
        self._arrays: dict[str, pa.Array] = {}  # combined once: the parser gives a chunk a block

    def array(self, name: str) -> pa.Array:
        found = self._arrays.get(name)
        if found is None:
            column = self.table.column(name)
            found = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            self._arrays[name] = found
        return found

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
    keys = "|".join(_re2_literal(json.dumps(n, ensure_ascii=False)[1:-1]) for n in names)
    # One pass for the candidates: a text naming a key of ``names`` literally, or holding
    # a backslash (a key may be written with escapes); the exact checks run on those.
    candidates = _np_mask(pc.match_substring_regex(texts, f'"(?:{keys})"|\\\\'))
    hits = np.zeros(len(texts), dtype=bool)
    if not candidates.any():
        return hits
    idx = np.flatnonzero(candidates)
    sub = texts.take(pa.array(idx))
    named = pc.match_substring_regex(sub, f'"(?:{keys})"\\s*:\\s*null')
    escaped = pc.match_substring_regex(sub, _ESCAPED_KEY)
    hits[idx] = _np_mask(pc.or_(named, escaped))
    return hits


def _re2_literal(text: str) -> str:
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in text)


def rebase(values: pa.Table, shift: int) -> pa.Table:
    if shift == 0:
        return values
    row = pc.add(values.column("row"), pa.scalar(shift, pa.int64()))
    return values.set_column(0, values.schema.field(0), row)


# ---------------------------------------------------------------------------
# Parquet, fast


def fast_parquet(plan: Plan, item: Loaded) -> Piece | None:
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
    if not {"region", "type"} <= names or len(names) != table.num_columns:
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
                if pa.types.is_string(field.type):
                    column.validate(full=True)  # UTF-8
            columns[field.name] = column
    except (pa.ArrowException, ValueError):
        return None
    raw = pa.Table.from_arrays(list(columns.values()), names=list(columns))
    candidate = _Candidate(item, n)
    pieces = list(_check_group(plan, [candidate], raw, _ParquetSource(texts)))
    return pieces[0] if pieces else None


def _parse_texts(plan: Plan, texts: pa.Array, row_type: pa.DataType) -> pa.Array | None:
    """JSON object texts (null stays null) as a struct array of ``row_type``'s fields."""
    n = len(texts)
    filled = pc.fill_null(texts, "{}")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), filled), "\n")
    data = bytearray(joined[0].as_buffer().to_pybytes() + b"\n" if n else b"")
    screen = prescreen(data, 0, len(data), decimals=plan.decimals, nulls=False)
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
    """The JSON texts behind one Parquet segment's values."""

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


def table_rows(data: bytearray, schema: TableSchema) -> pa.Table | None:
    """One table's rows from JSON lines (``data`` ends with a newline), typed as
    ``schema.to_arrow()``, when the fast path vouches that ``format``'s validator and
    ``rows_to_arrow`` give exactly these rows; None when it cannot (the caller then asks
    the reference path, which also names any bad record)."""
    decimals = any(c.kind == "decimal" for c in schema.columns)
    screen = prescreen(data, 0, len(data), decimals=decimals, nulls=False)
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
