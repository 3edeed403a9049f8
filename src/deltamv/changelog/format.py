"""Parsing and validating segment files into event batches (docs/changelog-format.md).

Every check here is stateless: it looks at one record at a time (plus the segment's
region). Checks that need history (a COMMIT without its PREWRITE, a RESOLVED going
backwards) belong to the pipeline. A violation raises :class:`BadRecordError` naming
the segment file and the 1-based line (Parquet: row index + 1).

``value`` leaves here as normalised JSON text: compact, keys sorted, DECIMALs as
strings with exactly the column's scale, FLOAT/DOUBLE as JSON numbers, everything
else as given. :func:`values_to_arrow` turns such texts into typed columns.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import gc
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltamv.changelog.events import (
    COMMIT,
    COMMITTED,
    EVENT_SCHEMA,
    EVENT_TYPES,
    INITIALIZED,
    PREWRITE,
    PUT,
    RESOLVED,
    ROLLBACK,
)
from deltamv.changelog.segments import Segment
from deltamv.errors import BadRecordError
from deltamv.schema import INTEGER_RANGES, Column, TableSchema

__all__ = [
    "RowValueError",
    "normalise_value",
    "read_json_lines",
    "read_segment",
    "read_segment_data",
    "rows_to_arrow",
    "table_validators",
    "values_to_arrow",
]

_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = 3.4028234663852886e38
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
# JSONEncoder.encode builds a new C encoder per call; a value text is encoded for
# nearly every event, so keep one (no circularity check: parsed JSON has no cycles).
_c_encoder = (
    _c_make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
    if _c_make_encoder is not None
    else None
)


def _encode(obj: Any) -> str:
    """Normalised JSON text: compact, keys sorted, non-ASCII kept."""
    if _c_encoder is None:  # pragma: no cover - CPython has the C encoder
        return _ENCODER.encode(obj)
    return "".join(_c_encoder(obj, 0))


_encode_loose = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str
).encode  # informational texts (old_value) may hold Decimals from the DECIMAL decoder
_DECIMAL_CONTEXT = decimal.Context(prec=100, Emax=1000, Emin=-1000)


class RowValueError(Exception):
    """A row value that does not fit its table schema; the reason is the message."""


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# Two decoders: DECIMAL columns need the exact digits of JSON numbers, so when a
# table declares one, floats are parsed as Decimal (and FLOAT/DOUBLE columns convert).
_SCAN_FLOAT = json.scanner.make_scanner(  # type: ignore[attr-defined]
    json.JSONDecoder(parse_constant=_reject_constant)
)
_SCAN_DECIMAL = json.scanner.make_scanner(  # type: ignore[attr-defined]
    json.JSONDecoder(parse_constant=_reject_constant, parse_float=Decimal)
)


# ---------------------------------------------------------------------------
# Row values against a table schema


def _column_checker(col: Column) -> Callable[[Any], Any]:
    """A function returning the normalised JSON value, or raising RowValueError."""
    kind = "integer" if col.kind in INTEGER_RANGES else col.kind
    make = _CHECKERS.get(kind)
    if make is None:
        raise AssertionError(f"unhandled column kind {col.kind}")
    return make(col, _complaint(col))


Complaint = Callable[[Any, str], RowValueError]


def _complaint(col: Column) -> Complaint:
    """The error for a value of ``col`` that is not what it should be."""

    def bad(value: Any, expected: str) -> RowValueError:
        if isinstance(value, _Unreadable):  # no column takes one: say what it is
            return RowValueError(f"column {col.name!r} ({col.ddl_type}): Parquet {value}")
        return RowValueError(
            f"column {col.name!r} ({col.ddl_type}): {_short(value)} is not {expected}"
        )

    return bad


def _int_checker(col: Column, bad: Complaint) -> Callable[[Any], Any]:
    lo, hi = INTEGER_RANGES[col.kind]

    def check_int(v: Any) -> Any:
        if type(v) is int and lo <= v <= hi:
            return v
        raise bad(v, f"an integer in [{lo}, {hi}]")

    return check_int


def _float_checker(col: Column, bad: Complaint) -> Callable[[Any], Any]:
    limit = _FLOAT32_MAX if col.kind == "float" else math.inf

    def check_float(v: Any) -> Any:
        t = type(v)
        if t is float or t is int or t is Decimal:
            f = float(v)
            if math.isfinite(f) and abs(f) <= limit:
                return f if t is Decimal else v
        raise bad(v, "a finite JSON number in range")

    return check_float


def _decimal_checker(col: Column, bad: Complaint) -> Callable[[Any], Any]:
    quantum = Decimal(1).scaleb(-col.scale)
    max_digits = col.precision
    zero = format(Decimal(0).quantize(quantum), "f")

    def check_decimal(v: Any) -> Any:
        t = type(v)
        if t is str:
            if not _DECIMAL_TEXT.match(v):
                raise bad(v, "a decimal number")
            d = Decimal(v)
        elif t is int or t is Decimal:
            d = Decimal(v)
        elif t is float:
            d = Decimal(repr(v))
        else:
            raise bad(v, "a decimal number or numeric string")
        try:
            q = d.quantize(quantum, context=_DECIMAL_CONTEXT)
        except InvalidOperation:
            raise bad(v, f"a DECIMAL({col.precision},{col.scale})") from None
        if q != d or len(q.as_tuple().digits) > max_digits:
            raise bad(v, f"a DECIMAL({col.precision},{col.scale}) without rounding")
        return zero if q == 0 else format(q, "f")  # (no "-0.000")

    return check_decimal


def _string_checker(col: Column, bad: Complaint) -> Callable[[Any], Any]:
    def check_str(v: Any) -> Any:
        if type(v) is str:
            return v
        raise bad(v, "a string")

    return check_str


def _bool_checker(col: Column, bad: Complaint) -> Callable[[Any], Any]:
    def check_bool(v: Any) -> Any:
        if v is True or v is False:
            return v
        raise bad(v, "a boolean")

    return check_bool


def _text_checker(
    expected: str, parse: Callable[[str], object], native: Callable[[Any], bool] | None = None
) -> Callable[[Column, Complaint], Callable[[Any], Any]]:
    """The checker maker of a kind written as text that ``parse`` accepts (it raises
    ValueError otherwise); the value stays the text. A value ``native`` accepts (a
    Parquet segment's typed field: a date, a timestamp) stands for its ISO-8601 text."""

    def make(col: Column, bad: Complaint) -> Callable[[Any], Any]:
        def check_text(v: Any) -> Any:
            if native is not None and native(v):
                v = v.isoformat()
            if type(v) is str:
                try:
                    parse(v)
                    return v
                except ValueError:
                    pass
            raise bad(v, expected)

        return check_text

    return make


def _is_date(value: Any) -> bool:
    return type(value) is dt.date  # (a datetime is a date too)


def _is_timestamp(value: Any) -> bool:
    return isinstance(value, dt.datetime)  # (pandas' Timestamp, for nanoseconds, is one)


def _parse_date(text: str) -> dt.date:
    if len(text) != 10 or text[4] != "-" or text[7] != "-":  # fromisoformat takes more
        raise ValueError(text)
    return dt.date.fromisoformat(text)


def _parse_timestamp_text(text: str) -> dt.datetime:
    if len(text) < 10:
        raise ValueError(text)
    return _parse_timestamp(text)


def _parse_base64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)  # binascii.Error is a ValueError


# A column kind (every integer kind is "integer") -> the maker of its checker.
_CHECKERS: dict[str, Callable[[Column, Complaint], Callable[[Any], Any]]] = {
    "integer": _int_checker,
    "float": _float_checker,
    "double": _float_checker,
    "decimal": _decimal_checker,
    "string": _string_checker,
    "boolean": _bool_checker,
    "date": _text_checker('a date "YYYY-MM-DD"', _parse_date, _is_date),
    "timestamp": _text_checker(
        "an ISO-8601 timestamp string", _parse_timestamp_text, _is_timestamp
    ),
    "binary": _text_checker("base64 text", _parse_base64),
}


def _parse_timestamp(text: str) -> dt.datetime:
    if text.endswith(("Z", "z")):  # Python 3.10's fromisoformat does not know "Z"
        text = text[:-1] + "+00:00"
    return dt.datetime.fromisoformat(text)


class _TableValidator:
    """Checks and normalises one table's row objects."""

    __slots__ = ("checkers", "identity", "required", "schema")

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.checkers = {c.name: _column_checker(c) for c in schema.columns}
        self.required = tuple(c.name for c in schema.columns if not c.nullable)
        # Columns whose normalised value may differ from the parsed one.
        self.identity = not any(c.kind in ("decimal", "float", "double") for c in schema.columns)

    def normalise(self, row: Any) -> dict[str, Any]:
        """The row with every value checked (and normalised); raises RowValueError."""
        if type(row) is not dict:
            raise RowValueError(f"row {_short(row)} is not a JSON object")
        checkers = self.checkers
        out: dict[str, Any] | None = None if self.identity else {}
        for name, v in row.items():
            check = checkers.get(name)
            if check is None:
                raise RowValueError(
                    f"unknown column {name!r} (declared: {', '.join(self.schema.names)})"
                )
            if v is None:
                if out is not None:
                    out[name] = None
                continue
            nv = check(v)
            if out is not None:
                out[name] = nv
            elif nv is not v:  # a native date or timestamp, now its text: copy the row
                out = dict(row)
                out[name] = nv
        for name in self.required:
            if row.get(name) is None:
                raise RowValueError(f"column {name!r} is NOT NULL but missing or null")
        return row if out is None else out


def table_validators(tables: Mapping[str, TableSchema]) -> dict[str, _TableValidator]:
    return {name: _TableValidator(schema) for name, schema in tables.items()}


def normalise_value(row: Any, schema: TableSchema) -> str:
    """Check a row object against ``schema``; return its normalised JSON text.

    Raises RowValueError with a one-line reason when the row does not fit.
    """
    return _encode(_TableValidator(schema).normalise(row))


# ---------------------------------------------------------------------------
# Events


class _Bad(Exception):
    """A record-level violation; the caller adds file and line."""


def _int_field(rec: dict[str, Any], name: str, etype: str) -> int:
    v = rec.get(name)
    if type(v) is int and 0 <= v <= _INT64_MAX:
        return v
    if v is None:
        raise _Bad(f"{etype} event without required field {name!r}")
    raise _Bad(f"field {name!r} must be a non-negative 64-bit integer, got {_short(v)}")


def _str_field(rec: dict[str, Any], name: str, etype: str) -> str:
    v = rec.get(name)
    if type(v) is str:
        return v
    if v is None:
        raise _Bad(f"{etype} event without required field {name!r}")
    raise _Bad(f"field {name!r} must be a string, got {_short(v)}")


def _opt_old_value(rec: dict[str, Any]) -> str | None:
    v = rec.get("old_value")
    if v is None:
        return None
    if type(v) is not dict:
        raise _Bad(f"field 'old_value' must be an object or null, got {_short(v)}")
    return _encode_loose(v)


# The EVENT_SCHEMA fields after file, line, region and seq, in order.
_EVENT_FIELDS = EVENT_SCHEMA.names[4:]


class _Columns:
    """EVENT_SCHEMA rows being collected, one tuple per event (transposed at the end)."""

    def __init__(self, validators: Mapping[str, _TableValidator], region: int) -> None:
        self.validators = validators
        self.region = region
        self.rows: list[tuple[Any, ...]] = []

    def add(self, rec: Any) -> None:
        """Validate one decoded record and append it; raises _Bad."""
        etype = self._event_type(rec)
        row: tuple[Any, ...]
        if etype == RESOLVED:
            row = (etype, None, None, _int_field(rec, "ts", etype), *_NO_FIELDS[:10])
        elif etype == INITIALIZED:
            row = _initialized(rec)
        elif etype in _ROW_TYPES:
            row = self._row_event(rec, etype)
        else:  # RETIRED: nothing but region and type
            row = (etype, *_NO_FIELDS)
        self.rows.append(row)

    def _event_type(self, rec: Any) -> str:
        """The record's type, once it is an object of this segment's region."""
        if type(rec) is not dict:
            raise _Bad(f"event is not a JSON object: {_short(rec)}")
        region = rec.get("region")
        if region != self.region or type(region) is not int:
            if region is None:
                raise _Bad("event without required field 'region'")
            raise _Bad(
                f"field 'region' is {_short(region)} but the segment is in region-{self.region}"
            )
        etype = rec.get("type")
        if etype not in EVENT_TYPES or type(etype) is not str:
            if etype is None:
                raise _Bad("event without required field 'type'")
            raise _Bad(
                f"unknown event type {_short(etype)} (valid: {', '.join(sorted(EVENT_TYPES))})"
            )
        return etype

    def _row_event(self, rec: dict[str, Any], etype: str) -> tuple[Any, ...]:
        """The fields of a PREWRITE, COMMIT, ROLLBACK or COMMITTED, checked in order."""
        start_ts = _int_field(rec, "start_ts", etype)
        table = _str_field(rec, "table", etype)
        key = _str_field(rec, "key", etype)
        validator = self.validators.get(table)
        if validator is None:
            raise _Bad(f"unknown table {table!r} (declared: {', '.join(sorted(self.validators))})")
        commit_ts = None
        if etype in (COMMIT, COMMITTED):
            commit_ts = _int_field(rec, "commit_ts", etype)
            if commit_ts <= start_ts:
                raise _Bad(f"commit_ts {commit_ts} is not greater than start_ts {start_ts}")
        op = value = old_value = primary = large = None
        if etype in (PREWRITE, COMMITTED):
            op, value = _change(rec, etype, table, key, validator)
            old_value = _opt_old_value(rec)
            if etype == PREWRITE:
                primary, large = _lock_hints(rec)
        return (etype, start_ts, commit_ts, None, table, key, op, value, old_value,
                None, None, None, primary, large)  # fmt: skip

    def to_table(self, segment: Segment) -> pa.Table:
        n = len(self.rows)
        # pyarrow converts lists several times faster than tuples.
        columns = (
            [list(c) for c in zip(*self.rows, strict=True)] if n else [[]] * len(_EVENT_FIELDS)
        )
        data: dict[str, Any] = {
            "file": pa.array([segment.path] * n, pa.string()),
            "line": pa.array(range(1, n + 1), pa.int64()),
            "region": pa.array([segment.region] * n, pa.int64()),
            "seq": pa.array([segment.seq] * n, pa.int64()),
        }
        for name, column in zip(_EVENT_FIELDS, columns, strict=True):
            data[name] = pa.array(column, EVENT_SCHEMA.field(name).type)
        return pa.Table.from_pydict(data, schema=EVENT_SCHEMA)


_ROW_TYPES = frozenset({PREWRITE, COMMIT, ROLLBACK, COMMITTED})
_NO_FIELDS = (None,) * 13  # every EVENT_SCHEMA field after ``type``, absent


def _initialized(rec: dict[str, Any]) -> tuple[Any, ...]:
    start_key = _str_field(rec, "start_key", INITIALIZED)
    end_key = _str_field(rec, "end_key", INITIALIZED)
    parents = rec.get("parents")
    if parents is not None and (
        type(parents) is not list
        or not all(type(x) is int and 0 <= x <= _INT64_MAX for x in parents)
    ):
        raise _Bad(f"field 'parents' must be a list of region ids, got {_short(parents)}")
    return (INITIALIZED, *_NO_FIELDS[:8], start_key, end_key, parents, None, None)


def _change(
    rec: dict[str, Any], etype: str, table: str, key: str, validator: _TableValidator
) -> tuple[str, str | None]:
    """``op`` and the normalised ``value`` of a PREWRITE or COMMITTED."""
    op = rec.get("op")
    if op == PUT:
        v = rec.get("value")
        if v is None:
            raise _Bad(f"{etype} PUT without required field 'value'")
        try:
            return PUT, _encode(validator.normalise(v))
        except RowValueError as e:
            raise _Bad(f"table {table!r} key {_short(key)}: value {e}") from None
    if op != "DELETE" or type(op) is not str:
        if op is None:
            raise _Bad(f"{etype} event without required field 'op'")
        raise _Bad(f"unknown op {_short(op)} (valid: DELETE, PUT)")
    return op, None


def _lock_hints(rec: dict[str, Any]) -> tuple[str | None, bool | None]:
    """A PREWRITE's optional ``primary`` and ``large``."""
    primary = rec.get("primary")
    if primary is not None and type(primary) is not str:
        raise _Bad(f"field 'primary' must be a string, got {_short(primary)}")
    large = rec.get("large")
    if large is not None and type(large) is not bool:
        raise _Bad(f"field 'large' must be a boolean, got {_short(large)}")
    return primary, large


def _needs_decimal(validators: Mapping[str, _TableValidator]) -> bool:
    return any(c.kind == "decimal" for v in validators.values() for c in v.schema.columns)


def read_segment(
    segment: Segment,
    tables: Mapping[str, TableSchema] | Mapping[str, _TableValidator],
) -> pa.Table:
    """Parse and validate one segment file into a table of exactly ``EVENT_SCHEMA``.

    Rows keep the file's line order. Raises BadRecordError(file, line, reason) on the
    first record that breaks the contract (a stateless check), BadRecordError(file,
    None, reason) when the file as a whole cannot be read (e.g. a Parquet segment with
    a wrong schema).
    """
    if segment.fmt == "parquet":
        validators = _as_validators(tables)
        with _gc_paused():
            return _read_parquet(segment, validators, segment.path)
    return read_segment_data(segment, _read_file(segment.path), tables)


def read_segment_data(
    segment: Segment,
    data: bytes,
    tables: Mapping[str, TableSchema] | Mapping[str, _TableValidator],
) -> pa.Table:
    """:func:`read_segment` over the segment's bytes, already read by the caller.

    Same checks, same rows, same errors, as long as ``data`` holds the file's bytes; the
    one difference is a Parquet file that cannot be opened at all, whose reason names
    ``<Buffer>`` instead of the path (callers wanting the exact text re-read the path).
    """
    validators = _as_validators(tables)
    with _gc_paused():
        if segment.fmt == "jsonl":
            return _read_jsonl(segment, _text_lines(segment.path, data), validators)
        return _read_parquet(segment, validators, pa.BufferReader(data))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: parsing allocates ~2 containers per event and none form
    cycles, yet each allocation burst triggers full collections (~15% of parse time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _as_validators(
    tables: Mapping[str, TableSchema] | Mapping[str, _TableValidator],
) -> Mapping[str, _TableValidator]:
    if all(isinstance(v, _TableValidator) for v in tables.values()):
        return tables  # type: ignore[return-value]
    return table_validators(tables)  # type: ignore[arg-type]


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise BadRecordError(path, None, f"cannot read file: {e.strerror or e}") from None


def _file_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file, without the last line's trailing newline."""
    return _text_lines(path, _read_file(path))


def _text_lines(path: str, raw: bytes) -> list[str]:
    """The lines of a file's bytes (UTF-8), without the last line's trailing newline."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = raw.count(b"\n", 0, e.start) + 1
        raise BadRecordError(path, lineno, f"not UTF-8 text (byte {raw[e.start]:#04x})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the trailing newline of the last line
    return lines


def _read_jsonl(
    segment: Segment, lines: list[str], validators: Mapping[str, _TableValidator]
) -> pa.Table:
    path = segment.path
    scan = _SCAN_DECIMAL if _needs_decimal(validators) else _SCAN_FLOAT
    cols = _Columns(validators, segment.region)
    add = cols.add
    lineno = 0
    try:
        for lineno, line in enumerate(lines, 1):  # noqa: B007 - used in the handlers
            # The C scanner without json.loads' wrapper: about twice as fast per line.
            try:
                rec, end = scan(line, 0)
            except (StopIteration, ValueError):
                rec, end = None, -1
            if end != len(line):
                rec = _parse_line_slow(line, scan)
            add(rec)
    except _Bad as e:
        raise BadRecordError(path, lineno, str(e)) from None
    return cols.to_table(segment)


def _parse_line_slow(line: str, scan: Any) -> Any:
    """Decode a line the fast path rejected; raise _Bad saying why it is not JSON."""
    stripped = line.strip()
    if not stripped:
        raise _Bad("blank line (every line must be one JSON object)")
    try:
        rec, end = scan(stripped, 0)
    except StopIteration:
        raise _Bad(f"not JSON: {_short(stripped)}") from None
    except ValueError as e:
        reason = getattr(e, "msg", str(e))
        raise _Bad(f"not JSON ({reason}): {_short(stripped)}") from None
    if end != len(stripped):
        raise _Bad(f"not JSON (extra data after column {end + 1}): {_short(stripped)}")
    return rec


def read_json_lines(path: str, *, decimals: bool) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded object)`` for each line of a JSON-lines file.

    ``decimals``: JSON numbers with a fraction decode as ``Decimal`` (exact). Raises
    BadRecordError for unreadable files, non-UTF-8 text, blank lines and non-JSON.
    """
    lines = _file_lines(path)
    scan = _SCAN_DECIMAL if decimals else _SCAN_FLOAT
    for lineno, line in enumerate(lines, 1):
        try:
            yield lineno, _parse_line_slow(line, scan)
        except _Bad as e:
            raise BadRecordError(path, lineno, str(e)) from None


# Parquet columns and the Arrow type families they may have.
_PARQUET_KINDS: dict[str, Callable[[pa.DataType], bool]] = {
    "region": pa.types.is_integer,
    "type": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "start_ts": pa.types.is_integer,
    "commit_ts": pa.types.is_integer,
    "ts": pa.types.is_integer,
    "table": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "key": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "op": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "value": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or _is_row(t),
    "old_value": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or _is_row(t),
    "start_key": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "end_key": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "parents": lambda t: (
        (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)
    ),
    "primary": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "large": pa.types.is_boolean,
}


def _is_row(t: pa.DataType) -> bool:
    """A struct whose fields can be a row's columns: no two of them share a name."""
    return pa.types.is_struct(t) and len({f.name for f in t}) == t.num_fields


def _read_parquet(
    segment: Segment, validators: Mapping[str, _TableValidator], source: str | pa.NativeFile
) -> pa.Table:
    path = segment.path
    try:
        table = pq.read_table(source)
    except (OSError, pa.ArrowException) as e:
        raise BadRecordError(path, None, f"not a readable Parquet file: {_one_line(e)}") from None
    for required in ("region", "type"):
        if required not in table.column_names:
            raise BadRecordError(path, None, f"Parquet segment has no {required!r} column")
    present = []
    for name in table.column_names:
        accepts = _PARQUET_KINDS.get(name)
        if accepts is None:
            continue  # unknown fields are ignored
        if not accepts(table.schema.field(name).type):
            raise BadRecordError(
                path, None, f"Parquet column {name!r} has type {table.schema.field(name).type}"
            )
        present.append(name)
    table = table.select(present)
    cols = _Columns(validators, segment.region)
    row_no = 0  # 1-based row of the record being checked
    scan = _SCAN_DECIMAL if _needs_decimal(validators) else _SCAN_FLOAT
    json_cols = [
        n
        for n in ("value", "old_value")
        if n in present and not pa.types.is_struct(table.schema.field(n).type)
    ]
    try:
        for batch in table.to_batches():
            for rec in _parquet_records(batch):
                row_no += 1
                for n in json_cols:
                    text = rec[n]
                    if text is not None:
                        try:
                            rec[n] = _parse_line_slow(text, scan)
                        except _Bad as e:
                            raise _Bad(f"column {n!r}: {e}") from None
                cols.add(rec)
    except _Bad as e:
        raise BadRecordError(path, row_no, str(e)) from None
    return cols.to_table(segment)


def _parquet_records(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """The rows of ``batch`` as ``to_pylist`` gives them, except that a cell Python
    cannot hold becomes an :class:`_Unreadable` instead of failing the whole batch."""
    try:
        yield from batch.to_pylist()
        return
    except _AS_PY_ERRORS:
        pass
    names = batch.schema.names
    for i in range(batch.num_rows):
        row = batch.slice(i, 1)
        try:
            yield row.to_pylist()[0]
        except _AS_PY_ERRORS:
            yield {
                name: parquet_cell(column[0])
                for name, column in zip(names, row.columns, strict=True)
            }


# What pyarrow's ``as_py`` raises for a value Python cannot hold: OverflowError for a
# date or timestamp outside years 1-9999, a LookupError for a time zone it does not
# know, ValueError for a struct with two fields of one name, UnicodeDecodeError (a
# ValueError too) for a string that is not UTF-8.
_AS_PY_ERRORS = (OverflowError, ValueError, LookupError)


def parquet_cell(scalar: pa.Scalar) -> Any:
    """``scalar.as_py()``, with what Python cannot hold as an :class:`_Unreadable`: a
    struct's other fields stay readable (and checked as usual)."""
    try:
        return scalar.as_py()
    except _AS_PY_ERRORS as e:
        error = e
    t = scalar.type
    if pa.types.is_struct(t):
        names = [f.name for f in t]
        if len(set(names)) == len(names):
            return {name: parquet_cell(scalar[k]) for k, name in enumerate(names)}
    return _Unreadable(scalar, error)


class _Unreadable:
    """A typed Parquet value Python cannot hold (a date or timestamp outside years
    1-9999, a time zone it does not know, a string that is not UTF-8). No checker of a
    column or field accepts one, so a ``value`` or field holding one is a bad record; in
    a field the event ignores, or in an ``old_value`` (which is not checked), it stands
    for its description."""

    __slots__ = ("text",)

    def __init__(self, scalar: pa.Scalar, error: BaseException) -> None:
        t = scalar.type
        if isinstance(error, OverflowError) and (pa.types.is_timestamp(t) or pa.types.is_date(t)):
            unit = "days" if pa.types.is_date32(t) else "ms" if pa.types.is_date64(t) else t.unit
            self.text = (
                f"{t} value {scalar.value} ({unit} since 1970-01-01) is outside years 0001-9999"
            )
        elif isinstance(error, UnicodeDecodeError):
            self.text = f"{t} value that is not UTF-8 (byte {error.object[error.start]:#04x})"
        else:
            self.text = f"{t} value Python cannot read ({type(error).__name__}: {_one_line(error)})"

    def __str__(self) -> str:
        return self.text


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


# ---------------------------------------------------------------------------
# Normalised value texts to typed columns


def values_to_arrow(
    values: Sequence[str | None] | pa.Array | pa.ChunkedArray, schema: TableSchema
) -> pa.Table:
    """Typed columns (``schema.to_arrow()``) from normalised value texts.

    ``None`` (a deleted row) gives a row of nulls. The texts are trusted to have been
    validated by :func:`read_segment` or :func:`normalise_value`; DECIMALs are exact,
    TIMESTAMPs are converted to UTC (a timestamp without offset is taken as UTC).
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    loads = json.loads
    return rows_to_arrow([loads(v) if v is not None else None for v in values], schema)


def rows_to_arrow(rows: Sequence[Mapping[str, Any] | None], schema: TableSchema) -> pa.Table:
    """Typed columns from validated, normalised row objects (see :func:`values_to_arrow`)."""
    arrays = []
    for col in schema.columns:
        name = col.name
        raw = [r.get(name) if r is not None else None for r in rows]
        arrays.append(pa.array(_convert(raw, col), col.arrow_type()))
    return pa.Table.from_arrays(arrays, schema=schema.to_arrow())


def _convert(raw: list[Any], col: Column) -> list[Any]:
    kind = col.kind
    if kind == "decimal":
        return [Decimal(str(v)) if v is not None else None for v in raw]
    if kind == "date":
        return [dt.date.fromisoformat(v) if v is not None else None for v in raw]
    if kind == "timestamp":
        out: list[dt.datetime | None] = []
        for v in raw:
            if v is None:
                out.append(None)
                continue
            t = _parse_timestamp(v)
            t = t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)
            out.append(t)
        return out
    if kind == "binary":
        return [base64.b64decode(v) if v is not None else None for v in raw]
    if kind in ("float", "double"):
        return [float(v) if v is not None else None for v in raw]
    return raw
