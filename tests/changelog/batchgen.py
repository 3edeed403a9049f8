"""Generated change logs and the oracle for the driver-side parser's differential tests.

The oracle is the reference path: ``format.read_segment`` for the events and errors,
``format.values_to_arrow`` over its value texts for the typed values, and, for the
``__old_<c>`` columns, the column checker of ``format`` applied to the ``old_value``
objects as Python's json module decodes them.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from deltamv.changelog.batch import EventBatch, ParseStats, parse_segments
from deltamv.changelog.format import (
    _SCAN_DECIMAL,
    _SCAN_FLOAT,
    RowValueError,
    _column_checker,
    _parse_line_slow,
    parquet_cell,
    read_segment,
    rows_to_arrow,
    values_to_arrow,
)
from deltamv.changelog.segments import Segment
from deltamv.errors import BadRecordError
from deltamv.schema import Column, TableSchema

TABLES = {
    "wide": TableSchema.from_ddl(
        "id BIGINT NOT NULL, i8 TINYINT, i16 SMALLINT, i32 INT, f FLOAT, d DOUBLE, "
        "amount DECIMAL(10,2), big DECIMAL(38,4), s STRING, b BOOLEAN, day DATE, "
        "at TIMESTAMP, bin BINARY"
    ),
    "other": TableSchema.from_ddl(
        "id BIGINT, name STRING NOT NULL, amount DECIMAL(12,3), at TIMESTAMP, the_tag STRING"
    ),
    "keyed": TableSchema.from_ddl("day DATE NOT NULL, at TIMESTAMP, code BINARY, f FLOAT"),
}
PRIMARY_KEYS = {"wide": ["id"], "other": ["id", "name"], "keyed": ["day", "at", "code", "f"]}
FIELDS = (
    "region", "type", "start_ts", "commit_ts", "ts", "table", "key", "op", "value",
    "old_value", "start_key", "end_key", "parents", "primary", "large",
)  # fmt: skip

_FLOAT32_MAX = 3.4028234663852886e38
_TS = st.integers(0, 2**63 - 1)


# ---------------------------------------------------------------------------
# JSON text with exact number tokens


class Raw:
    """A JSON token written as is (an exact decimal number, NaN, a duplicate key...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text!r})"


def dumps(obj: Any, *, spaced: bool = False, ascii_only: bool = False) -> str:
    """JSON text of ``obj``; :class:`Raw` values are written verbatim."""
    comma, colon = (", ", ": ") if spaced else (",", ":")
    if isinstance(obj, Raw):
        return obj.text
    if isinstance(obj, dict):
        return (
            "{"
            + comma.join(
                json.dumps(k, ensure_ascii=ascii_only)
                + colon
                + dumps(v, spaced=spaced, ascii_only=ascii_only)
                for k, v in obj.items()
            )
            + "}"
        )
    if isinstance(obj, list):
        return "[" + comma.join(dumps(v, spaced=spaced, ascii_only=ascii_only) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=ascii_only)


# ---------------------------------------------------------------------------
# Valid column values


def _float_token(x: float) -> Raw:
    return Raw(repr(float(x)) if not x.is_integer() or abs(x) >= 1e16 else repr(x))


@st.composite
def _decimal(draw: st.DrawFn, precision: int, scale: int) -> Any:
    digits = draw(st.integers(0, precision))
    unscaled = draw(st.integers(-(10**digits) + 1, 10**digits - 1))
    d = Decimal(f"{unscaled}E-{scale}")  # exact (scaleb would round to 28 digits)
    form = draw(st.sampled_from(["str", "num", "exp", "trailing", "plus"]))
    if form == "str":
        return format(d, "f")
    if form == "num":
        return Raw(format(d, "f"))
    if form == "exp":
        return Raw(format(d, "E")) if draw(st.booleans()) else format(d, "E")
    if form == "trailing":
        return format(d, "f") + ("0" if scale else ".00")
    return ("+" if d >= 0 else "") + format(d, "f")


@st.composite
def _timestamp(draw: st.DrawFn) -> str:
    moment = draw(st.datetimes(min_value=dt.datetime(2, 1, 2), max_value=dt.datetime(9998, 12, 30)))
    zone = draw(st.sampled_from(["", "Z", "+00:00", "+05:30", "-08:00", "-00:00", "+23:59"]))
    sep = draw(st.sampled_from(["T", " "]))
    frac = draw(st.sampled_from([0, 1, 3, 6]))
    day = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
    if draw(st.integers(0, 9)) == 0:
        return day  # a date alone: midnight UTC
    text = f"{day}{sep}{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    if frac:
        text += "." + f"{moment.microsecond:06d}"[:frac]
    return text + zone


# Text for "clean" logs, the ones the fast path must take whole: no "+" (the prescreen
# sends "+-" to the reference path), no escapes needed in keys.
_CLEAN_CHARS = st.characters(blacklist_characters="+", blacklist_categories=("Cs",))
_CLEAN_TEXT = st.text(_CLEAN_CHARS, max_size=8)
_NAME = st.text("abcdefxyz_", min_size=1, max_size=4)


# Valid for Python's datetime.fromisoformat, outside the forms the fast path takes.
_ODD_TIMESTAMPS = st.sampled_from(
    [
        "2024-01-02T03:04", "2024-01-02T03", "2024-01-02T03:04:05+0530", "2024-01-02T03:04:05z",
        "2024-01-02T03:04:05,5", "2024-01-02T03:04:05.1234567", "0001-01-01T00:00:00",
        "9999-12-31T23:59:59", "20240102T030405", "2024-01-02T03:04:05+05", "2024-W01-1T00:00:00",
    ]
)  # fmt: skip
_ODD_DATES = st.sampled_from(["2024-W01-1", "2024-W52-7"])


def value_strategy(col: Column, clean: bool = True) -> st.SearchStrategy[Any]:
    """A valid JSON value for ``col`` (sometimes null when nullable). ``clean``: in forms
    the fast path decides itself."""
    kind = col.kind
    s: st.SearchStrategy[Any]
    if kind == "tinyint":
        s = st.integers(-(2**7), 2**7 - 1)
    elif kind == "smallint":
        s = st.integers(-(2**15), 2**15 - 1)
    elif kind == "int":
        s = st.integers(-(2**31), 2**31 - 1)
    elif kind == "bigint":
        s = st.integers(-(2**63), 2**63 - 1)
    elif kind == "float":
        s = st.one_of(
            st.floats(-_FLOAT32_MAX, _FLOAT32_MAX, allow_nan=False)
            .filter(lambda x: not (x == 0 and math.copysign(1, x) < 0))
            .map(_float_token),
            st.integers(-(2**40), 2**40),
        )
    elif kind == "double":
        s = st.one_of(
            st.floats(allow_nan=False, allow_infinity=False)
            .filter(lambda x: not (x == 0 and math.copysign(1, x) < 0))
            .map(_float_token),
            st.integers(-(2**70), 2**70),
        )
    elif kind == "decimal":
        s = _decimal(col.precision, col.scale)
    elif kind == "string":
        s = _CLEAN_TEXT
    elif kind == "boolean":
        s = st.booleans()
    elif kind == "date":
        s = st.dates(min_value=dt.date(1, 1, 1)).map(
            lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
        )
        if not clean:
            s = st.one_of(s, _ODD_DATES)
    elif kind == "timestamp":
        s = _timestamp() if clean else st.one_of(_timestamp(), _ODD_TIMESTAMPS)
    else:
        s = st.binary(max_size=10).map(lambda b: base64.b64encode(b).decode())
    return st.one_of(st.none(), s) if col.nullable else s


@st.composite
def row_strategy(draw: st.DrawFn, schema: TableSchema, clean: bool = True) -> dict[str, Any]:
    row = {}
    for col in schema.columns:
        if col.nullable and draw(st.integers(0, 3)) == 0:
            continue  # absent
        row[col.name] = draw(value_strategy(col, clean))
    keys = list(row)
    order = draw(st.permutations(keys))
    return {k: row[k] for k in order}


_EXTRA = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=4,
)


_CLEAN_EXTRA = {
    "extra": st.integers(-(2**62), 2**62),
    "meta": st.dictionaries(_NAME, st.text(_CLEAN_CHARS, max_size=4), max_size=3),
    "note": _CLEAN_TEXT,
}


@st.composite
def old_value_strategy(draw: st.DrawFn, schema: TableSchema, clean: bool) -> Any:
    """An ``old_value``: absent, null, or an object (loosely checked: wrong types too)."""
    choice = draw(st.integers(0, 5)) if not clean else draw(st.sampled_from([0, 3]))
    if choice == 0:
        return None
    old = draw(row_strategy(schema, clean))
    if choice == 1:
        for col in schema.columns:  # a wrong kind for a key column: null in __old_
            if col.name in old and draw(st.booleans()):
                old[col.name] = draw(st.sampled_from([True, [1], {"x": 1}]))
    if choice == 2:
        old[draw(st.sampled_from(["zzz", "name", "amount"]))] = draw(_EXTRA)
    return old


@st.composite
def event_strategy(
    draw: st.DrawFn, region: int, clean: bool, tables: Mapping[str, TableSchema] = TABLES
) -> dict[str, Any]:
    """A valid event. ``clean``: one the fast path takes (no unknown fields whose type
    changes from event to event, no wrong kinds in ``old_value``, no "+" in text)."""
    text = _CLEAN_TEXT if clean else st.text(max_size=8)
    etype = draw(
        st.sampled_from(
            ["PREWRITE", "PREWRITE", "COMMITTED", "COMMITTED", "COMMIT", "ROLLBACK",
             "INITIALIZED", "RESOLVED", "RETIRED"]
        )
    )  # fmt: skip
    e: dict[str, Any] = {"region": region, "type": etype}
    if etype == "RESOLVED":
        e["ts"] = draw(_TS)
    elif etype == "INITIALIZED":
        e["start_key"] = draw(text)
        e["end_key"] = draw(text)
        if draw(st.booleans()):
            e["parents"] = draw(st.lists(_TS, max_size=3))
    elif etype != "RETIRED":
        start = draw(st.integers(0, 2**63 - 2))
        e["start_ts"] = start
        table = draw(st.sampled_from(sorted(tables)))
        e["table"] = table
        e["key"] = draw(text)
        if etype in ("COMMIT", "COMMITTED"):
            e["commit_ts"] = draw(st.integers(start + 1, 2**63 - 1))
        if etype in ("PREWRITE", "COMMITTED"):
            op = draw(st.sampled_from(["PUT", "PUT", "DELETE"]))
            e["op"] = op
            if op == "PUT":
                e["value"] = draw(row_strategy(tables[table], clean))
            old = draw(old_value_strategy(tables[table], clean))
            if old is not None or draw(st.booleans()):
                e["old_value"] = old
            if etype == "PREWRITE":
                if draw(st.booleans()):
                    e["primary"] = draw(text)
                if draw(st.booleans()):
                    e["large"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:  # unknown fields are ignored
        if clean:
            name = draw(st.sampled_from(sorted(_CLEAN_EXTRA)))
            e[name] = draw(_CLEAN_EXTRA[name])
        else:
            e[draw(st.sampled_from(["extra", "meta", "Region", "valuе"]))] = draw(_EXTRA)
    keys = list(e)
    order = draw(st.permutations(keys))
    return {k: e[k] for k in order}


@st.composite
def segment_strategy(draw: st.DrawFn, region: int, clean: bool) -> list[dict[str, Any]]:
    return draw(st.lists(event_strategy(region, clean), max_size=12))


# ---------------------------------------------------------------------------
# Files


def write_jsonl(
    path: Path,
    lines: Sequence[str],
    *,
    final_newline: bool = True,
    crlf: bool = False,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    end = "\r\n" if crlf else "\n"
    text = end.join(lines) + (end if final_newline and lines else "")
    path.write_bytes(text.encode("utf-8"))
    return path


def write_parquet(path: Path, events: Sequence[dict[str, Any]], *, spaced: bool = False) -> Path:
    """A Parquet segment with JSON-text ``value`` and ``old_value`` columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: dict[str, list[Any]] = {f: [] for f in FIELDS}
    for e in events:
        for f in FIELDS:
            v = e.get(f)
            if f in ("value", "old_value") and f in e and v is not None:
                v = dumps(v, spaced=spaced)
            elif isinstance(v, Raw):
                v = json.loads(v.text)
            columns[f].append(v)
    types = {
        "region": pa.int64(), "type": pa.string(), "start_ts": pa.int64(),
        "commit_ts": pa.int64(), "ts": pa.int64(), "table": pa.string(), "key": pa.string(),
        "op": pa.string(), "value": pa.string(), "old_value": pa.string(),
        "start_key": pa.string(), "end_key": pa.string(), "parents": pa.list_(pa.int64()),
        "primary": pa.string(), "large": pa.bool_(),
    }  # fmt: skip
    table = pa.table({f: pa.array(v, types[f]) for f, v in columns.items()})
    pq.write_table(table, path)
    return path


def segment_of(path: Path) -> Segment:
    region = int(path.parent.name.removeprefix("region-"))
    return Segment(
        region, int(path.stem), str(path), "parquet" if path.suffix == ".parquet" else "jsonl"
    )


# ---------------------------------------------------------------------------
# The oracle


def reference(
    segments: Sequence[Segment],
    tables: Mapping[str, TableSchema] = TABLES,
    primary_keys: Mapping[str, Sequence[str]] = PRIMARY_KEYS,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Events (as rows, ``file`` as the segment's index) and, per table, the value rows
    the reference path gives; raises its BadRecordError."""
    events: list[dict[str, Any]] = []
    values: dict[str, list[dict[str, Any]]] = {}
    decimals = any(c.kind == "decimal" for s in tables.values() for c in s.columns)
    for index, segment in enumerate(segments):
        table = read_segment(segment, tables)
        rows = table.to_pylist()
        raw_olds = _raw_old_values(segment, decimals) if any(r["old_value"] for r in rows) else {}
        for r in rows:
            row_index = len(events)
            if r["type"] in ("PREWRITE", "COMMITTED"):
                name = r["table"]
                schema = tables[name]
                nullable = TableSchema(tuple(_nullable(c) for c in schema.columns))
                typed = values_to_arrow([r["value"]], nullable).to_pylist()[0]
                out = {"row": row_index, **typed}
                old = raw_olds.get(r["line"]) if r["old_value"] else None
                for c in primary_keys.get(name, ()):
                    col = _nullable(schema.column(c))  # type: ignore[arg-type]
                    v = old.get(c) if type(old) is dict else None
                    try:
                        v = None if v is None else _column_checker(col)(v)
                    except RowValueError:
                        v = None
                    out["__old_" + c] = rows_to_arrow([{c: v}], TableSchema((col,))).to_pylist()[0][
                        c
                    ]
                values.setdefault(name, []).append(out)
            event = {k: v for k, v in r.items() if k not in ("value", "old_value")}
            event["file"] = index
            events.append(event)
    return events, values


def _nullable(col: Column) -> Column:
    import dataclasses

    return dataclasses.replace(col, nullable=True)


def _raw_old_values(segment: Segment, decimals: bool) -> dict[int, Any]:
    scan = _SCAN_DECIMAL if decimals else _SCAN_FLOAT
    out: dict[int, Any] = {}
    if segment.fmt == "jsonl":
        lines = Path(segment.path).read_bytes().decode().split("\n")
        for i, line in enumerate(lines, 1):
            if line.strip():
                rec = _parse_line_slow(line, scan)
                out[i] = rec.get("old_value") if type(rec) is dict else None
    else:
        column = [parquet_cell(v) for v in pq.read_table(segment.path).column("old_value")]
        for i, v in enumerate(column, 1):
            out[i] = _parse_line_slow(v, scan) if isinstance(v, str) else v
    return out


def same_floats(a: Any, b: Any) -> bool:
    """Equality that tells -0.0 from 0.0 and compares NaN with itself."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return bool(a == b) and type(a) is type(b)


def check_same(
    segments: Sequence[Segment],
    tables: Mapping[str, TableSchema] = TABLES,
    primary_keys: Mapping[str, Sequence[str]] = PRIMARY_KEYS,
) -> tuple[EventBatch | None, ParseStats]:
    """Assert the driver-side parser gives what the reference path gives, or the same
    error. Returns the batch (None on error) and the paths taken."""
    try:
        expected = reference(segments, tables, primary_keys)
        expected_error = None
    except BadRecordError as e:
        expected_error = e
    except Exception as e:
        # Some inputs make the reference path fail with something other than a
        # BadRecordError (invalid UTF-8 in a Parquet string column, a lone surrogate, a
        # 400-digit number in a DOUBLE column...): the new path must fail the same way.
        stats = ParseStats()
        try:
            parse_segments(segments, tables, primary_keys, stats=stats)
        except Exception as got:
            assert (type(got), str(got)) == (type(e), str(e))
            return None, stats
        raise AssertionError(f"accepted what the reference fails on: {e!r}") from None
    stats = ParseStats()
    try:
        batch, fingerprints = parse_segments(segments, tables, primary_keys, stats=stats)
        error = None
    except BadRecordError as e:
        error = e
    if expected_error is not None:
        assert error is not None, f"accepted what the reference rejects: {expected_error}"
        got = (error.file, error.line, error.reason)
        assert got == (expected_error.file, expected_error.line, expected_error.reason)
        return None, stats
    assert error is None, f"rejected what the reference accepts: {error}"
    events, values = expected
    assert batch.files == tuple(s.path for s in segments)
    assert batch.events.schema.equals(_control_schema())
    got_events = batch.events.to_pylist()
    assert len(got_events) == len(events)
    for g, e in zip(got_events, events, strict=True):
        assert g == e
    assert set(batch.values) == set(values)
    for name, rows in values.items():
        vt = batch.values[name]
        assert vt.schema.field("row").type == pa.int64()
        got_rows = vt.to_pylist()
        assert len(got_rows) == len(rows)
        for g, e in zip(got_rows, rows, strict=True):
            assert g.keys() == e.keys()
            for k in e:
                assert same_floats(g[k], e[k]), (name, k, g[k], e[k])
    assert [f.path for f in fingerprints] == [s.path for s in segments]
    for f, s in zip(fingerprints, segments, strict=True):
        data = Path(s.path).read_bytes()
        assert f.size == len(data) and f.mtime_ns == os.stat(s.path).st_mtime_ns
        assert (f.region, f.seq) == (s.region, s.seq)
        import hashlib

        assert f.digest == hashlib.blake2b(data, digest_size=16).hexdigest()
    return batch, stats


def _control_schema() -> pa.Schema:
    from deltamv.changelog.events import CONTROL_SCHEMA

    return CONTROL_SCHEMA


# -- hypothesis settings of the differential tests -------------------------------------
EXAMPLES = int(os.environ.get("DELTAMV_HYPOTHESIS_EXAMPLES", "60"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- corrupted logs: every kind of bad record ----------------------------------------


def _set(field: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def mutate(e: dict[str, Any]) -> Any:
        return {**e, field: value}

    return mutate


def _drop(field: str) -> Callable[[dict[str, Any]], Any]:
    def mutate(e: dict[str, Any]) -> Any:
        return {k: v for k, v in e.items() if k != field}

    return mutate


def _in_value(column: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def mutate(e: dict[str, Any]) -> Any:
        if not isinstance(e.get("value"), dict):
            return {**e, "op": "PUT", "value": {column: value}}
        return {**e, "value": {**e["value"], column: value}}

    return mutate


def _text(f: Callable[[str], str]) -> Callable[[dict[str, Any]], Any]:
    def mutate(e: dict[str, Any]) -> Any:
        return Raw(f(dumps(e)))

    return mutate


# Each applies to one event (given as a dict) and returns the event or a Raw line.
MUTATIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "blank line": _text(lambda line: ""),
    "spaces only": _text(lambda line: "   "),
    "not json": _text(lambda line: "not json"),
    "truncated": _text(lambda line: line[: len(line) // 2]),
    "two objects": _text(lambda line: line + line),
    "two objects spaced": _text(lambda line: line + " " + line),
    "object then null": _text(lambda line: line + " null"),
    "array": _text(lambda line: "[1, 2]"),
    "null": _text(lambda line: "null"),
    "number": _text(lambda line: "1"),
    "string": _text(lambda line: '"x"'),
    "bom": _text(lambda line: "\ufeff" + line),
    "nbsp": _text(lambda line: "\u00a0" + line),
    "vertical tab": _text(lambda line: "\x0b" + line),
    "duplicate region": _text(lambda line: '{"region": 999, ' + line[1:]),
    "duplicate type": _text(lambda line: line[:-1] + ', "type": "RETIRED"}'),
    "trailing comma": _text(lambda line: line[:-1] + ",}"),
    "nan field": _set("extra", Raw("NaN")),
    "infinity field": _set("extra", Raw("-Infinity")),
    "nan nested": _set("extra", Raw('{"a": [1, NaN]}')),
    "huge number": _set("extra", Raw("1e400")),
    "wrong region": _set("region", 999),
    "region string": _set("region", "1"),
    "region bool": _set("region", True),
    "region float": _set("region", Raw("1.0")),
    "no region": _drop("region"),
    "no type": _drop("type"),
    "unknown type": _set("type", "RESOLVE"),
    "type number": _set("type", 5),
    "ts string": _set("ts", "9"),
    "ts negative": _set("ts", -1),
    "ts too big": _set("ts", 2**63),
    "start_ts negative": _set("start_ts", -5),
    "start_ts float": _set("start_ts", Raw("5.0")),
    "no start_ts": _drop("start_ts"),
    "commit_ts not greater": lambda e: {**e, "commit_ts": e.get("start_ts", 0)},
    "no commit_ts": _drop("commit_ts"),
    "no ts": _drop("ts"),
    "no key": _drop("key"),
    "key number": _set("key", 5),
    "no table": _drop("table"),
    "unknown table": _set("table", "nope"),
    "table number": _set("table", 3),
    "unknown op": _set("op", "UPSERT"),
    "op null": _set("op", None),
    "no op": _drop("op"),
    "value null": _set("value", None),
    "value list": _set("value", [1]),
    "value string": _set("value", "x"),
    "old_value list": _set("old_value", [1]),
    "old_value number": _set("old_value", 5),
    "primary number": _set("primary", 1),
    "large string": _set("large", "yes"),
    "parents strings": _set("parents", ["x"]),
    "parents negative": _set("parents", [1, -1]),
    "parents null item": _set("parents", [1, None]),
    "parents string": _set("parents", "x"),
    "no start_key": _drop("start_key"),
    "end_key number": _set("end_key", 1),
    "undeclared column": _in_value("colour", "red"),
    "undeclared column null": _in_value("colour", None),
    "other table's column": _in_value("the_tag", "x"),
    "other table's column null": _in_value("the_tag", None),
    "other table's column null, escaped": _text(
        lambda line: line.replace('"value": {', '"value": {"\\u0074he_tag": null, ', 1)
    ),
    "other table's column null, spaced": _text(
        lambda line: line.replace('"value": {', '"value": {"i8" :  null , ', 1)
    ),
    "id null": _in_value("id", None),
    "name null": _in_value("name", None),
    "id string": _in_value("id", "1"),
    "id float": _in_value("id", Raw("1.0")),
    "id exponent": _in_value("id", Raw("1e2")),
    "id too big": _in_value("id", 2**63),
    "id bool": _in_value("id", True),
    "i8 range": _in_value("i8", 128),
    "i16 range": _in_value("i16", -(2**15) - 1),
    "i32 range": _in_value("i32", 2**31),
    "f string": _in_value("f", "1.5"),
    "f range": _in_value("f", Raw("3.5e38")),
    "f nan": _in_value("f", Raw("NaN")),
    "d infinity": _in_value("d", Raw("Infinity")),
    "d minus zero": _in_value("d", Raw("-0")),
    "d minus zero float": _in_value("d", Raw("-0.0")),
    "d huge exponent": _in_value("d", Raw("1e400")),
    "d bool": _in_value("d", False),
    "amount scale": _in_value("amount", "12.345"),
    "amount scale zero": _in_value("amount", "0.001"),
    "amount number scale": _in_value("amount", Raw("12.3456")),
    "amount precision": _in_value("amount", "123456789.5"),
    "amount precision number": _in_value("amount", Raw("123456789.5")),
    "amount text": _in_value("amount", "1,5"),
    "amount exponent sign": _in_value("amount", "1e+-2"),
    "amount spaces": _in_value("amount", " 1.5"),
    "amount bool": _in_value("amount", True),
    "amount nan": _in_value("amount", "NaN"),
    "big 39 digits": _in_value("big", "1" + "0" * 38),
    "s number": _in_value("s", 5),
    "b number": _in_value("b", 1),
    "b string": _in_value("b", "true"),
    "day invalid": _in_value("day", "2023-02-29"),
    "day short": _in_value("day", "2024-1-01"),
    "day compact": _in_value("day", "20240101"),
    "day year zero": _in_value("day", "0000-01-01"),
    "day week": _in_value("day", "2024-W01-1"),
    "at words": _in_value("at", "yesterday"),
    "at hour 25": _in_value("at", "2024-01-02T25:00:00"),
    "at leap second": _in_value("at", "2024-01-02T23:59:60"),
    "at offset 24h": _in_value("at", "2024-01-02T03:04:05+24:00"),
    "at number": _in_value("at", 1700000000),
    "at lowercase t": _in_value("at", "2024-01-02t03:04:05"),
    "at feb 30": _in_value("at", "2024-02-30T00:00:00Z"),
    "at year 1 offset": _in_value("at", "0001-01-01T00:30:00-01:00"),
    "bin padding": _in_value("bin", "YQ="),
    "bin chars": _in_value("bin", "!!!!"),
    "bin space": _in_value("bin", "YQ= ="),
    "bin excess": _in_value("bin", "YQ==YQ=="),
    "bin lenient bits": _in_value("bin", "YR=="),
    "bin non-ascii": _in_value("bin", "YQé="),
}
