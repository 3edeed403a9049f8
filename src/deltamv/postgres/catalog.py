"""What PostgreSQL's catalog says about the tables a job reads, mapped to deltamv.

:func:`read_catalog` looks each table up and returns a :class:`PgTable`: its columns
as a deltamv :class:`~deltamv.schema.TableSchema`, its primary key, replica identity
and OID. Everything deltamv cannot read soundly is refused with a one-line
:class:`~deltamv.errors.ConfigError` naming the table (key ``tables.<name>``):

- a missing or unreadable table, or one that is not a table (a view, a foreign table), or a
  partitioned table (PostgreSQL does not send a TRUNCATE, DETACH or DROP of a single
  partition: its partitions can be read as tables);
- a table without a primary key; a DEFERRABLE primary key (a transaction could hold
  two rows with one key, and rows are matched by key);
- REPLICA IDENTITY NOTHING (PostgreSQL would not send deletes), or USING INDEX on
  other columns than the primary key (deletes would not carry the key);
- a column whose type has no deltamv equivalent, and generated columns (PostgreSQL
  15's logical replication does not send them).

Type mapping (PostgreSQL -> deltamv DDL): smallint SMALLINT, integer INT, bigint
BIGINT, numeric(p,s) DECIMAL(p,s) (p <= 38, 0 <= s <= p), real FLOAT, double precision
DOUBLE, text/varchar/char STRING, boolean BOOLEAN, date DATE, timestamptz TIMESTAMP,
timestamp (without time zone) TIMESTAMP read as UTC wall-clock time, bytea BINARY,
uuid/json/jsonb STRING (their text). A numeric without precision is refused: its
values may have any number of digits, which no DECIMAL holds exactly; declare the
column ``DECIMAL(p,s)`` in the job's schema to accept it (a value that does not fit
then stops the job, naming it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from deltamv.errors import ConfigError
from deltamv.schema import (
    RESERVED_REASON,
    Column,
    Kind,
    TableSchema,
    alike_names,
    reserved_column,
)

__all__ = [
    "SUPPORTED_TYPES",
    "PgColumn",
    "PgTable",
    "check_declared",
    "parse_pg_table",
    "read_catalog",
]

ReplicaIdentity = Literal["d", "f", "i", "n"]

# type OID -> (PostgreSQL name, deltamv kind); numeric's precision comes from its typmod.
PG_TYPES: dict[int, tuple[str, Kind]] = {
    21: ("smallint", "smallint"),
    23: ("integer", "int"),
    20: ("bigint", "bigint"),
    1700: ("numeric", "decimal"),
    700: ("real", "float"),
    701: ("double precision", "double"),
    25: ("text", "string"),
    1043: ("character varying", "string"),
    1042: ("character", "string"),
    16: ("boolean", "boolean"),
    1082: ("date", "date"),
    1184: ("timestamp with time zone", "timestamp"),
    1114: ("timestamp without time zone", "timestamp"),
    17: ("bytea", "binary"),
    2950: ("uuid", "string"),
    114: ("json", "string"),
    3802: ("jsonb", "string"),
}
NUMERIC_OID = 1700

SUPPORTED_TYPES = (
    "smallint, integer, bigint, numeric(p,s) with p <= 38, real, double precision, "
    "text, varchar, char, boolean, date, timestamp, timestamptz, bytea, uuid, json, jsonb"
)

# Declared kinds a PostgreSQL kind may be read into without losing anything.
_WIDER: dict[str, tuple[str, ...]] = {
    "smallint": ("smallint", "int", "bigint"),
    "int": ("int", "bigint"),
    "bigint": ("bigint",),
    "float": ("float", "double"),
    "double": ("double",),
}


@dataclass(frozen=True)
class PgColumn:
    """A column as PostgreSQL has it: what pgoutput's Relation message must match."""

    name: str
    type_oid: int
    typmod: int
    type_name: str  # format_type(), e.g. "numeric(12,2)"
    not_null: bool


@dataclass(frozen=True)
class PgTable:
    """One table a job reads: the deltamv side (``name``, ``schema``, ``primary_key``)
    and the PostgreSQL side (``qualified``, ``oid``, ``replica_identity``,
    ``pg_columns``).

    ``schema`` is what rows are typed as: the mapping of the catalog, or the job's
    declared schema once :func:`check_declared` accepted it. ``pg_columns`` are in
    PostgreSQL's column order; ``schema`` may order them differently.
    """

    name: str
    namespace: str
    relname: str
    oid: int
    schema: TableSchema
    primary_key: tuple[str, ...]
    replica_identity: ReplicaIdentity
    pg_columns: tuple[PgColumn, ...]

    @property
    def qualified(self) -> str:
        """``schema.table`` as a person reads it (not quoted for SQL)."""
        return f"{self.namespace}.{self.relname}"

    def pg_column(self, name: str) -> PgColumn:
        for c in self.pg_columns:
            if c.name == name:
                return c
        raise KeyError(name)


def parse_pg_table(config_name: str, pg_table: str | None) -> tuple[str, str]:
    """``(namespace, relname)`` of a ``pg_table`` setting, default ``public.<config_name>``.

    Unquoted parts are folded to lower case as PostgreSQL does; ``"Quoted"`` parts are
    kept. A name without a dot is in ``public``.
    """
    if pg_table is None:
        return "public", config_name
    parts = _split_identifier(pg_table)
    if parts is None or len(parts) not in (1, 2) or not all(parts):
        raise ConfigError(
            f"tables.{config_name}.pg_table",
            f"expected schema.table or table, got {pg_table!r}",
        )
    return ("public", parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _split_identifier(text: str) -> list[str] | None:
    parts: list[str] = []
    i, n = 0, len(text)
    while i <= n:
        if i < n and text[i] == '"':
            j = i + 1
            buf = []
            while True:
                k = text.find('"', j)
                if k < 0:
                    return None
                buf.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                break
            parts.append("".join(buf))
            i = k + 1
        else:
            k = text.find(".", i)
            k = n if k < 0 else k
            word = text[i:k].strip()
            if '"' in word:
                return None
            parts.append(word.lower())
            i = k
        if i < n and text[i] != ".":
            return None
        i += 1
    return parts


_TABLE_SQL = """
SELECT c.oid::int8, c.relkind::text, c.relreplident::text, n.nspname::text, c.relname::text,
       has_table_privilege(c.oid, 'SELECT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
_COLUMNS_SQL = """
SELECT a.attname::text, a.atttypid::int8, a.atttypmod, format_type(a.atttypid, a.atttypmod),
       a.attnotnull, a.attgenerated::text
FROM pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_INDEX_SQL = """
SELECT i.indisprimary, i.indisreplident, ic.relname::text,
       array(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             ORDER BY k.ord),
       coalesce((SELECT con.condeferrable FROM pg_constraint con
                 WHERE con.conindid = i.indexrelid AND con.contype = 'p'), false)
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = %s AND (i.indisprimary OR i.indisreplident)
"""
_RELKINDS = {"v": "a view", "m": "a materialized view", "f": "a foreign table",
             "S": "a sequence", "c": "a composite type", "i": "an index"}  # fmt: skip


Declared = tuple[TableSchema | None, Sequence[str] | None]


def read_catalog(
    conn: psycopg.Connection[Any],
    tables: Sequence[tuple[str, str | None]],
    *,
    declared: Mapping[str, Declared] | None = None,
) -> dict[str, PgTable]:
    """Look up each ``(config_name, pg_table or None)`` and map it (module docstring).

    ``declared`` holds the job's ``(schema, primary_key)`` per table where the config
    declares them (either may be None); each is checked by :func:`check_declared` and
    becomes the table's schema. A declared DECIMAL is what makes an unconstrained
    numeric column readable.

    Read-only; raises :class:`ConfigError` (key ``tables.<config_name>...``) on the
    first table deltamv cannot read, naming it and why.
    """
    out: dict[str, PgTable] = {}
    for name, pg_table in tables:
        namespace, relname = parse_pg_table(name, pg_table)
        schema, primary_key = (declared or {}).get(name, (None, None))
        table = _read_table(conn, name, namespace, relname, lenient=schema is not None)
        out[name] = check_declared(table, schema, primary_key)
    return out


def _read_table(
    conn: psycopg.Connection[Any], name: str, namespace: str, relname: str, *, lenient: bool = False
) -> PgTable:
    key = f"tables.{name}"
    qualified = f"{namespace}.{relname}"
    with conn.cursor() as cur:
        row = cur.execute(_TABLE_SQL, [namespace, relname]).fetchone()
        if row is None:
            db = conn.info.dbname
            raise ConfigError(key, f"table {qualified} does not exist in database {db}")
        oid, relkind, replident, namespace, relname, readable = row
        if relkind == "p":
            raise ConfigError(
                key,
                f"{qualified} is a partitioned table: logical replication does not send a "
                "TRUNCATE, DETACH or DROP of one partition, so its copy could silently "
                "diverge; read its partitions as tables instead",
            )
        if relkind != "r":
            what = _RELKINDS.get(relkind, f"of relkind {relkind!r}")
            raise ConfigError(key, f"{qualified} is {what}, not a table")
        if not readable:
            raise ConfigError(
                key, f"user {conn.info.user} may not read table {qualified} (GRANT SELECT)"
            )
        columns = cur.execute(_COLUMNS_SQL, [oid]).fetchall()
        indexes = cur.execute(_INDEX_SQL, [oid]).fetchall()
    pg_columns: list[PgColumn] = []
    schema_columns: list[Column] = []
    for col_name, type_oid, typmod, type_name, not_null, generated in columns:
        where = f"{qualified}.{col_name}"
        if generated:
            raise ConfigError(
                key,
                f"column {where} is a generated column, which PostgreSQL's logical "
                "replication does not send; drop it or compute it in a view",
            )
        pg_columns.append(PgColumn(col_name, type_oid, typmod, type_name, not_null))
        if lenient and type_oid == NUMERIC_OID and numeric_precision_scale(typmod) is None:
            # a declared DECIMAL decides (check_declared); values are checked as read
            schema_columns.append(Column(col_name, "decimal", 38, 0, nullable=not not_null))
            continue
        schema_columns.append(
            _map_column(key, where, col_name, type_oid, typmod, type_name, not_null)
        )
    names = [c.name for c in pg_columns]
    reserved = reserved_column(names)
    if reserved is not None:
        raise ConfigError(key, f"column {qualified}.{reserved}: {RESERVED_REASON}")
    twice = alike_names(names)
    if twice is not None:
        first, second = twice
        raise ConfigError(
            key,
            f"table {qualified} has columns {first!r} and {second!r}, whose names differ only"
            " in case: Delta tables and Spark do not tell them apart",
        )
    primary = [r for r in indexes if r[0]]
    if not primary:
        raise ConfigError(
            key, f"table {qualified} has no primary key; deltamv needs one to identify rows"
        )
    pk = tuple(primary[0][3])
    if primary[0][4]:
        raise ConfigError(
            key,
            f"the primary key of {qualified} is DEFERRABLE; deltamv matches rows by key "
            "and needs it checked immediately",
        )
    if replident == "n":
        raise ConfigError(
            key,
            f"table {qualified} has REPLICA IDENTITY NOTHING, so PostgreSQL would not send "
            f"its deletes (ALTER TABLE {qualified} REPLICA IDENTITY DEFAULT)",
        )
    if replident == "i":
        ident = [r for r in indexes if r[1]]
        cols = tuple(ident[0][3]) if ident else ()
        if set(cols) != set(pk):
            index = ident[0][2] if ident else "?"
            raise ConfigError(
                key,
                f"table {qualified} has REPLICA IDENTITY USING INDEX {index} on "
                f"({', '.join(cols)}), not its primary key ({', '.join(pk)}): deletes "
                "would not carry the row's key",
            )
    return PgTable(
        name=name,
        namespace=namespace,
        relname=relname,
        oid=int(oid),
        schema=TableSchema(tuple(schema_columns)),
        primary_key=pk,
        replica_identity=replident,
        pg_columns=tuple(pg_columns),
    )


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a numeric typmod, None when unconstrained."""
    if typmod < 4:
        return None
    raw = typmod - 4
    precision = (raw >> 16) & 0xFFFF
    scale = ((raw & 0x7FF) ^ 1024) - 1024  # PostgreSQL 15 allows a negative scale
    return precision, scale


def _map_column(
    key: str, where: str, name: str, type_oid: int, typmod: int, type_name: str, not_null: bool
) -> Column:
    def refuse(extra: str = "") -> ConfigError:
        return ConfigError(
            key,
            f"column {where} has type {type_name}, which deltamv cannot map "
            f"(supported: {SUPPORTED_TYPES}){extra}",
        )

    mapped = PG_TYPES.get(type_oid)
    if mapped is None:
        raise refuse()
    kind = mapped[1]
    if type_oid != NUMERIC_OID:
        return Column(name, kind, nullable=not not_null)
    ps = numeric_precision_scale(typmod)
    if ps is None:
        raise refuse(
            "; a numeric without precision may hold any number of digits: give it one "
            "(numeric(p,s)) or declare the column DECIMAL(p,s) in the job's schema"
        )
    precision, scale = ps
    if not (1 <= precision <= 38 and 0 <= scale <= precision):
        raise refuse()
    return Column(name, "decimal", precision, scale, nullable=not not_null)


def check_declared(
    table: PgTable,
    schema: TableSchema | None,
    primary_key: Sequence[str] | None,
) -> PgTable:
    """``table`` typed as the job's declared ``schema`` and ``primary_key`` (either may
    be None: the catalog's is kept).

    The declared schema must name the same columns as PostgreSQL (any order: rows come
    in the declared order), each of a type that holds every value of the PostgreSQL
    column (the same kind, a wider integer or float, a DECIMAL with at least the
    integer and fraction digits; any DECIMAL for an unconstrained numeric, whose values
    are then checked as they are read), and not NOT NULL where PostgreSQL allows NULL.
    The declared primary key must be PostgreSQL's (same columns; its order is the order
    of the row key). One-line :class:`ConfigError` otherwise, key
    ``tables.<name>.schema`` or ``tables.<name>.primary_key``.
    """
    result = table
    if schema is not None:
        key = f"tables.{table.name}.schema"
        pg_names = [c.name for c in table.pg_columns]
        declared = schema.names
        missing = [n for n in pg_names if n not in declared]
        extra = [n for n in declared if n not in pg_names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"{table.qualified} also has {', '.join(missing)}")
            if extra:
                parts.append(f"{table.qualified} has no column {', '.join(extra)}")
            raise ConfigError(
                key,
                f"declared columns differ from PostgreSQL's: {'; '.join(parts)} "
                "(declare exactly the table's columns, or omit schema to read it)",
            )
        for col in schema.columns:
            pg = table.pg_column(col.name)
            reason = _incompatible(pg, col)
            if reason:
                raise ConfigError(
                    key,
                    f"column {col.name} is declared {col.ddl_type} but "
                    f"{table.qualified}.{col.name} is {pg.type_name}: {reason}",
                )
        result = dataclasses.replace(result, schema=schema)
    if primary_key is not None:
        if set(primary_key) != set(table.primary_key) or len(primary_key) != len(table.primary_key):
            raise ConfigError(
                f"tables.{table.name}.primary_key",
                f"declared [{', '.join(primary_key)}] but the primary key of "
                f"{table.qualified} is ({', '.join(table.primary_key)})",
            )
        result = dataclasses.replace(result, primary_key=tuple(primary_key))
    return result


def _incompatible(pg: PgColumn, col: Column) -> str | None:
    mapped = PG_TYPES.get(pg.type_oid)
    if mapped is None:
        return f"deltamv cannot read that type (supported: {SUPPORTED_TYPES})"
    if col.nullable is False and not pg.not_null:
        return "declared NOT NULL but PostgreSQL allows NULL there"
    kind = mapped[1]
    if pg.type_oid == NUMERIC_OID:
        if col.kind != "decimal":
            return "a numeric reads into DECIMAL only"
        ps = numeric_precision_scale(pg.typmod)
        if ps is None:
            return None  # unconstrained: every value is checked as it is read
        precision, scale = ps
        if scale < 0 or col.scale < scale or col.precision - col.scale < precision - scale:
            return f"DECIMAL({col.precision},{col.scale}) cannot hold every {pg.type_name}"
        return None
    allowed = _WIDER.get(kind, (kind,))
    if col.kind not in allowed:
        valid = " or ".join(k.upper() for k in allowed)
        return f"it reads into {valid}"
    return None
