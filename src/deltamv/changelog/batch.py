"""Driver-side parsing of segment files into typed, columnar event batches.

:func:`parse_segments` reads each segment file once, fingerprints the bytes it read,
and parses them with pyarrow (JSON lines through ``pyarrow.json`` over the concatenated
segments, Parquet through ``pyarrow.parquet``) into :data:`CONTROL_SCHEMA` events plus,
per table, the row values as typed Arrow columns. It accepts and rejects exactly what
``format.read_segment`` (the reference path) does, with the same ``BadRecordError``:

- The fast path checks every rule of docs/changelog-format.md that the reference path checks,
  column by column (``_typed``), and checks the bytes for what pyarrow's reader
  forgives (blank lines, two objects on a line, NaN, invalid UTF-8...).
- A segment the fast path rejects, or cannot decide about, is parsed again from the
  same bytes by the reference path, which raises its error or returns its events; those
  are then typed with ``format.values_to_arrow``. Correctness never depends on the fast
  path; speed does. Segments fall back one by one, never a whole batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltamv.changelog._fast import Piece, fast_jsonl, fast_parquet, rebase
from deltamv.changelog._plan import OLD_PREFIX, Plan, plan_for
from deltamv.changelog._read import Loaded, SegmentFingerprint, load_segments
from deltamv.changelog.events import COMMITTED, CONTROL_SCHEMA, PREWRITE
from deltamv.changelog.format import (
    _SCAN_DECIMAL,
    _SCAN_FLOAT,
    RowValueError,
    _column_checker,
    _parse_line_slow,
    parquet_cell,
    read_segment,
    read_segment_data,
    rows_to_arrow,
    values_to_arrow,
)
from deltamv.changelog.segments import Segment
from deltamv.errors import BadRecordError
from deltamv.schema import TableSchema

__all__ = [
    "CONTROL_SCHEMA",
    "OLD_PREFIX",
    "EventBatch",
    "ParseStats",
    "SegmentFingerprint",
    "concat_batches",
    "parse_segments",
]


@dataclass(frozen=True)
class EventBatch:
    """Events of a run of segments, columnar and typed.

    ``events`` has :data:`CONTROL_SCHEMA`, one row per event in input order (segments in
    the order given, lines in file order); its ``file`` column indexes ``files``.
    ``values`` holds, for each declared table with at least one PREWRITE or COMMITTED
    event, one row per such event (PUT and DELETE) in event order: ``row`` (int64, the
    event's index in ``events``), the table's columns typed as ``TableSchema.to_arrow()``
    but nullable (a PUT's value; all null for a DELETE), named by ``change_column`` (a
    column named like an event field is ``#``-prefixed), then ``__old_<c>`` for each
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

    def count(self, piece: Piece, reference_file: str | None) -> None:
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
    plan = plan_for(tuple(tables.items()), tuple((t, tuple(c)) for t, c in primary_keys.items()))
    shared, loaded = load_segments(segments, plan)
    pieces: dict[int, Piece] = {}
    if plan.fast:
        for piece in fast_jsonl(plan, shared, loaded):
            pieces[piece.first] = piece
        for item in loaded:
            if item.data is not None and item.segment.fmt == "parquet":
                found = fast_parquet(plan, item)
                if found is not None:
                    pieces[item.index] = found
    # The reference path for everything else, in input order: its first error is the
    # first bad record of the first bad segment (the fast path accepts only good ones).
    i = 0
    ordered: list[Piece] = []
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
# The reference path


def _reference_piece(plan: Plan, item: Loaded) -> Piece:
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
    return Piece(index, 1, events, values)


_POSITION = frozenset({"file", "line", "region", "seq"})


class _RawOld:
    """The ``old_value`` objects of a segment's records as parsed (for ``__old_``)."""

    def __init__(self, segment: Segment, data: bytes, plan: Plan) -> None:
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
            old = parquet_cell(self.column[row])
            if isinstance(old, str):
                old = _parse_line_slow(old, self.scan)
        return old.get(name) if type(old) is dict else None


# ---------------------------------------------------------------------------
# Putting the pieces together


def concat_batches(batches: Sequence[EventBatch]) -> EventBatch:
    """Batches parsed apart as one: their segments one after the other (each event's
    ``file`` and each value row's ``row`` moved past the batches before it), contiguous."""
    files: list[str] = []
    events: list[pa.Table] = []
    values: dict[str, list[pa.Table]] = {}
    rows = 0
    for batch in batches:
        file = batch.events.column("file")
        moved = pc.add(file, pa.scalar(len(files), file.type))
        events.append(batch.events.set_column(0, batch.events.schema.field(0), moved))
        for name, table in batch.values.items():
            values.setdefault(name, []).append(rebase(table, rows))
        files.extend(batch.files)
        rows += batch.events.num_rows
    return EventBatch(
        tuple(files),
        pa.concat_tables(events).combine_chunks(),
        {name: pa.concat_tables(parts).combine_chunks() for name, parts in values.items()},
    )


def _assemble(files: tuple[str, ...], pieces: list[Piece]) -> EventBatch:
    offset = 0
    events = []
    values: dict[str, list[pa.Table]] = {}
    for piece in pieces:
        events.append(piece.events)
        for name, vt in piece.values.items():
            values.setdefault(name, []).append(rebase(vt, offset))
        offset += piece.events.num_rows
    return EventBatch(
        files,
        pa.concat_tables(events) if events else CONTROL_SCHEMA.empty_table(),
        {name: pa.concat_tables(parts) for name, parts in values.items()},
    )
