"""PostgreSQL's text output of a value -> the Arrow value of its deltamv column.

Both the snapshot copy (COPY ... CSV) and the change decoding (pgoutput protocol 1
sends text) see each value as the text of the type's output function, under the
session settings of :data:`deltamv.postgres.connect.SESSION_SETTINGS`. One function
turns a column of such texts into typed Arrow, so a row reads the same whichever
path it came by.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.errors import ConfigError
from deltamv.postgres.catalog import PgColumn, PgTable
from deltamv.schema import Column

__all__ = ["typed_column"]

_BYTEA, _BOOL, _TIMESTAMP, _TIMESTAMPTZ = 17, 16, 1114, 1184


def typed_column(texts: pa.Array, pg: PgColumn, col: Column, table: PgTable) -> pa.Array:
    """The values of ``texts`` (string or binary, null for NULL) as ``col``'s Arrow type.

    Raises a one-line :class:`ConfigError` (key ``tables.<name>``) naming the column and
    the first value that does not fit, e.g. a numeric ``NaN`` or a timestamp
    ``infinity``, which no Spark type holds.
    """
    if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
        if pg.type_oid == _BYTEA:
            return _bytea(texts, table, col)
        try:
            texts = texts.cast(pa.string())
        except pa.ArrowInvalid:
            raise _unfit(table, col, "is not valid UTF-8 text", None) from None
    try:
        return _typed(texts, pg, col, table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _unfit(table, col, None, _first_unfit(texts, pg, col, table)) from None


def _typed(texts: pa.Array, pg: PgColumn, col: Column, table: PgTable) -> pa.Array:
    target = col.arrow_type()
    if pg.type_oid == _BYTEA:
        return _bytea(texts.cast(pa.binary()), table, col)
    if pg.type_oid == _BOOL:
        return pc.equal(texts, "t")
    if pg.type_oid == _TIMESTAMP:
        # A timestamp without time zone is read as UTC wall-clock time.
        naive = pc.cast(texts, pa.timestamp("us"))
        return naive.cast(pa.timestamp("us", tz="UTC")).cast(target)
    if pg.type_oid == _TIMESTAMPTZ:
        return pc.cast(texts, pa.timestamp("us", tz="UTC")).cast(target)
    return pc.cast(texts, target)


def _bytea(texts: pa.Array, table: PgTable, col: Column) -> pa.Array:
    out: list[bytes | None] = []
    for v in texts.to_pylist():
        if v is None:
            out.append(None)
        elif v[:2] == b"\\x":
            out.append(bytes.fromhex(v[2:].decode("ascii")))
        else:
            raise _unfit(table, col, "is not bytea hex output (bytea_output = hex)", None)
    return pa.array(out, pa.binary())


def _first_unfit(texts: pa.Array, pg: PgColumn, col: Column, table: PgTable) -> str | None:
    for v in texts.to_pylist():
        if v is None:
            continue
        try:
            _typed(pa.array([v], texts.type), pg, col, table)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return str(v)
    return None


def _unfit(table: PgTable, col: Column, reason: str | None, value: str | None) -> ConfigError:
    where = f"{table.qualified}.{col.name}"
    what = reason or f"does not fit {col.ddl_type}"
    shown = f" value {value[:60]!r}" if value is not None else " a value"
    return ConfigError(f"tables.{table.name}", f"column {where}:{shown} {what}")
