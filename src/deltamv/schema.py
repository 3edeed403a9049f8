"""Table schemas declared in Spark SQL DDL, parsed without a JVM.

The change-log reader runs in Spark's Python workers, which have no SparkSession,
yet it must check every row value against its table's declared schema. So the
subset of Spark DDL that a source table may use is parsed here, once, into plain
data that travels to the workers, and turns into Arrow and Spark types on demand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

Kind = Literal[
    "tinyint", "smallint", "int", "bigint", "float", "double", "decimal",
    "string", "boolean", "date", "timestamp", "binary",
]  # fmt: skip

_ALIASES: dict[str, Kind] = {
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "decimal": "decimal",
    "dec": "decimal",
    "numeric": "decimal",
    "string": "string",
    "varchar": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "binary": "binary",
}

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}

# The columns the job keeps beside a table's own: the change log's and PostgreSQL's
# event fields in a table of changes (match, release, mirrors' input), and those of the
# old primary key a DELETE names (``__old_<pk>``).
_CHANGE_FIELDS = frozenset(
    {"row", "region", "type", "start_ts", "commit_ts", "fcommit", "key", "op", "_n",
     "_key", "_op", "_unchanged", "_prev_key", "__n"}
)  # fmt: skip
_OLD = "__old_"

# Names a table's column may not have: the mirrors' row key and row id, and the weight of
# a change (Z-set); SQLite compares column names ignoring case.
RESERVED_COLUMNS = ("_key", "__rowid", "__w")
RESERVED_REASON = (
    f"the job keeps the names {', '.join(RESERVED_COLUMNS)} (in any case) for columns of"
    " its own; rename the column"
)


def change_column(name: str) -> str:
    """The name a table's column ``name`` has in a table of changes: its own, unless it is
    one of the event fields kept beside it (``key``, ``op``, ``commit_ts`` ...), which is
    then prefixed with ``#`` (as is any name that is such a field behind ``#``s, so that
    no two names meet)."""
    bare = name.lstrip("#")
    clash = bare in _CHANGE_FIELDS or bare.startswith(_OLD)
    return "#" + name if clash else name


def alike_names(names: list[str]) -> tuple[str, str] | None:
    """The first two of ``names`` that are equal ignoring case (a Delta table's and
    Spark's rule for columns), or None."""
    seen: dict[str, str] = {}
    for name in names:
        if name.lower() in seen:
            return seen[name.lower()], name
        seen[name.lower()] = name
    return None


def reserved_column(names: list[str]) -> str | None:
    """The first of ``names`` the job keeps for itself (RESERVED_COLUMNS), or None."""
    for name in names:
        if name.lower() in RESERVED_COLUMNS:
            return name
    return None


_COLUMN = re.compile(
    r"""^\s*(?P<name>`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s+
        (?P<type>[A-Za-z_]+)\s*(?:\(\s*(?P<args>[0-9,\s]+)\s*\))?
        (?P<rest>.*)$""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    precision: int = 0
    scale: int = 0
    nullable: bool = True

    @property
    def ddl_type(self) -> str:
        if self.kind == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        return self.kind.upper()

    def arrow_type(self) -> pa.DataType:
        return {
            "tinyint": pa.int8(),
            "smallint": pa.int16(),
            "int": pa.int32(),
            "bigint": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "string": pa.string(),
            "boolean": pa.bool_(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "binary": pa.binary(),
        }.get(self.kind) or pa.decimal128(self.precision, self.scale)


@dataclass(frozen=True)
class TableSchema:
    """The columns of one source table, in declared order."""

    columns: tuple[Column, ...]

    @classmethod
    def from_ddl(cls, ddl: str) -> TableSchema:
        """Parse ``"id BIGINT, owner STRING NOT NULL, amount DECIMAL(18,2)"``.

        Raises ValueError with a message saying which column is wrong and what is valid.
        """
        columns: list[Column] = []
        seen: set[str] = set()
        for part in _split_top_level(ddl):
            match = _COLUMN.match(part)
            if not match:
                raise ValueError(f"cannot parse column definition {part.strip()!r}")
            name = match["name"].strip("`")
            type_word = match["type"].lower()
            kind = _ALIASES.get(type_word)
            if kind is None:
                valid = ", ".join(sorted({k.upper() for k in _ALIASES.values()}))
                raise ValueError(
                    f"column {name!r}: unsupported type {match['type']!r} (valid: {valid})"
                )
            precision, scale = 0, 0
            args = [a.strip() for a in (match["args"] or "").split(",") if a.strip()]
            if kind == "decimal":
                precision = int(args[0]) if args else 10
                scale = int(args[1]) if len(args) > 1 else 0
                if not (1 <= precision <= 38 and 0 <= scale <= precision):
                    raise ValueError(f"column {name!r}: bad DECIMAL({precision},{scale})")
            elif args and type_word not in ("varchar", "char"):
                raise ValueError(f"column {name!r}: type {match['type']} takes no arguments")
            rest = match["rest"].strip()
            nullable = True
            rest_upper = " ".join(rest.upper().split())
            if rest_upper.startswith("NOT NULL"):
                nullable = False
                rest_upper = rest_upper[len("NOT NULL") :].strip()
            if rest_upper and not rest_upper.startswith("COMMENT"):
                raise ValueError(f"column {name!r}: unexpected {rest!r} after the type")
            if name.lower() in seen:
                raise ValueError(f"column {name!r} declared twice")
            seen.add(name.lower())
            columns.append(Column(name, kind, precision, scale, nullable))
        if not columns:
            raise ValueError("no columns declared")
        reserved = reserved_column([c.name for c in columns])
        if reserved is not None:
            raise ValueError(f"column {reserved!r}: {RESERVED_REASON}")
        return cls(tuple(columns))

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def to_ddl(self) -> str:
        return ", ".join(
            f"`{c.name}` {c.ddl_type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns
        )

    def to_arrow(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow_type(), c.nullable) for c in self.columns])


def _split_top_level(ddl: str) -> list[str]:
    """Split on commas that are not inside parentheses, backticks or a quoted string (a
    ``COMMENT 'a, b'``; a backslash escapes the next character in one, as in Spark SQL)."""
    parts: list[str] = []
    depth, quote, escaped, start = 0, "", False, 0
    for i, ch in enumerate(ddl):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote != "`":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "`'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and ch == ",":
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    return [p for p in parts if p.strip()]
