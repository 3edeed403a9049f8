"""A decoder of pgoutput's logical replication messages, protocol version 1.

PostgreSQL's "Logical Replication Message Formats": each message is one byte of type
and its fields, integers big-endian, strings NUL-terminated. Version 1 sends column
values as the text of the type's output function ('t'), or 'n' for NULL, or 'u' for
an unchanged TOASTed value that PostgreSQL did not send.

Only the messages a protocol-1 stream holds are decoded: Begin, Commit, Origin,
Relation, Type, Insert, Update, Delete, Truncate. Anything else raises
:class:`PgOutputError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct
from typing import Final

__all__ = [
    "UNCHANGED",
    "Begin",
    "Commit",
    "Delete",
    "Insert",
    "Message",
    "Origin",
    "PgOutputError",
    "Relation",
    "RelationColumn",
    "Truncate",
    "TypeMessage",
    "Update",
    "Value",
    "decode",
    "decode_tuple",
]


class _Unchanged:
    """The marker of a TOASTed value PostgreSQL left out as unchanged ('u')."""

    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
Value = bytes | None | _Unchanged  # text of the value, NULL, or unchanged TOAST


class PgOutputError(ValueError):
    """A message that is not pgoutput protocol 1 (or is truncated)."""


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    commit_time: int  # µs since 2000-01-01 UTC
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: int  # the LSN of the commit record (== Begin.final_lsn)
    end_lsn: int  # the end of the commit record
    commit_time: int  # µs since 2000-01-01 UTC


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    key: bool  # part of the replica identity
    name: str
    type_oid: int
    typmod: int


@dataclass(frozen=True, slots=True)
class Relation:
    relid: int
    namespace: str  # "" means pg_catalog
    name: str
    replica_identity: str  # 'd', 'n', 'f' or 'i'
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class TypeMessage:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relid: int
    new: list[Value]


@dataclass(frozen=True, slots=True)
class Update:
    relid: int
    old_kind: str | None  # 'K' (identity columns only), 'O' (whole old row) or None
    old: list[Value] | None
    new: list[Value]


@dataclass(frozen=True, slots=True)
class Delete:
    relid: int
    old_kind: str  # 'K' or 'O'
    old: list[Value]


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


Message = Begin | Commit | Origin | Relation | TypeMessage | Insert | Update | Delete | Truncate

_I16 = Struct(">h")
_I32 = Struct(">i")
_U32 = Struct(">I")
_BEGIN = Struct(">qqI")
_COMMIT = Struct(">bqqq")
_REL_COL = Struct(">Ii")
_T, _N, _U, _B = 0x74, 0x6E, 0x75, 0x62


def decode_tuple(data: bytes, pos: int) -> tuple[list[Value], int]:
    """The values of the TupleData at ``data[pos:]``, and the position after it."""
    (count,) = _I16.unpack_from(data, pos)
    pos += 2
    values: list[Value] = []
    append = values.append
    for _ in range(count):
        kind = data[pos]
        pos += 1
        if kind == _T:
            (length,) = _I32.unpack_from(data, pos)
            pos += 4
            append(data[pos : pos + length])
            pos += length
        elif kind == _N:
            append(None)
        elif kind == _U:
            append(UNCHANGED)
        elif kind == _B:
            raise PgOutputError("binary column value: deltamv reads pgoutput in text mode")
        else:
            raise PgOutputError(f"unknown column kind {kind!r} in TupleData")
    return values, pos


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(0, pos)
    return data[pos:end].decode("utf-8"), end + 1


def decode(data: bytes) -> Message:
    """The message in ``data`` (one row of ``pg_logical_slot_peek_binary_changes``)."""
    try:
        return _decode(data)
    except (IndexError, ValueError) as e:
        if isinstance(e, PgOutputError):
            raise
        kind = chr(data[0]) if data else "?"
        raise PgOutputError(f"truncated or malformed pgoutput message {kind!r}: {e}") from None


def _decode(data: bytes) -> Message:
    kind = data[0]
    if kind == 0x49:  # 'I'
        (relid,) = _U32.unpack_from(data, 1)
        if data[5] != 0x4E:
            raise PgOutputError("Insert without its 'N' tuple")
        new, _ = decode_tuple(data, 6)
        return Insert(relid, new)
    if kind == 0x55:  # 'U'
        (relid,) = _U32.unpack_from(data, 1)
        pos = 5
        old_kind: str | None = None
        old: list[Value] | None = None
        if data[pos] in (0x4B, 0x4F):  # 'K', 'O'
            old_kind = chr(data[pos])
            old, pos = decode_tuple(data, pos + 1)
        if data[pos] != 0x4E:
            raise PgOutputError("Update without its 'N' tuple")
        new, _ = decode_tuple(data, pos + 1)
        return Update(relid, old_kind, old, new)
    if kind == 0x44:  # 'D'
        (relid,) = _U32.unpack_from(data, 1)
        if data[5] not in (0x4B, 0x4F):
            raise PgOutputError("Delete without its 'K' or 'O' tuple")
        old, _ = decode_tuple(data, 6)
        return Delete(relid, chr(data[5]), old)
    if kind == 0x42:  # 'B'
        final_lsn, commit_time, xid = _BEGIN.unpack_from(data, 1)
        return Begin(final_lsn, commit_time, xid)
    if kind == 0x43:  # 'C'
        flags, commit_lsn, end_lsn, commit_time = _COMMIT.unpack_from(data, 1)
        return Commit(flags, commit_lsn, end_lsn, commit_time)
    if kind == 0x52:  # 'R'
        (relid,) = _U32.unpack_from(data, 1)
        namespace, pos = _cstring(data, 5)
        name, pos = _cstring(data, pos)
        identity = chr(data[pos])
        (ncols,) = _I16.unpack_from(data, pos + 1)
        pos += 3
        columns = []
        for _ in range(ncols):
            flags = data[pos]
            col_name, pos = _cstring(data, pos + 1)
            type_oid, typmod = _REL_COL.unpack_from(data, pos)
            pos += 8
            columns.append(RelationColumn(bool(flags & 1), col_name, type_oid, typmod))
        return Relation(relid, namespace, name, identity, tuple(columns))
    if kind == 0x54:  # 'T'
        (nrels,) = _I32.unpack_from(data, 1)
        options = data[5]
        relids = tuple(_U32.unpack_from(data, 6 + 4 * i)[0] for i in range(nrels))
        return Truncate(relids, bool(options & 1), bool(options & 2))
    if kind == 0x4F:  # 'O'
        (lsn,) = Struct(">q").unpack_from(data, 1)
        name, _ = _cstring(data, 9)
        return Origin(lsn, name)
    if kind == 0x59:  # 'Y'
        (oid,) = _U32.unpack_from(data, 1)
        namespace, pos = _cstring(data, 5)
        name, _ = _cstring(data, pos)
        return TypeMessage(oid, namespace, name)
    raise PgOutputError(f"unknown pgoutput message type {chr(kind)!r} (protocol 1 expected)")
