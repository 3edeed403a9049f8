"""Read a slot's committed transactions between two WAL positions, as net row changes.

Positions
    A position ``p`` (an LSN, as the slot's ``confirmed_flush_lsn``) splits the
    transactions in two: those whose commit record starts below ``p`` and the others.
    :func:`read_changes` with ``after_lsn = a`` and ``upto_lsn = u`` reads exactly the
    transactions with ``a <= commit_lsn < u``, where ``commit_lsn`` is the LSN of the
    commit record (pgoutput's Begin ``final_lsn``). That is what PostgreSQL does:
    ``pg_logical_slot_peek_binary_changes(slot, u, ...)`` decodes the records that
    start below ``u`` and never returns part of a transaction, and a slot confirmed at
    ``a`` (``pg_replication_slot_advance(slot, a)``) no longer returns transactions
    whose commit starts below ``a``. So the batches ``[p0, p1), [p1, p2), ...`` never
    overlap nor leave a gap, and after the batch ``[a, u)`` is committed the slot is
    advanced to ``u``. A transaction the slot returns again (it can move back after a
    server crash: its position reaches disk at checkpoints) has ``commit_lsn < a`` and
    is dropped.

    ``u`` must not lie beyond the WAL flushed when the batch is read (the flushed
    position :func:`deltamv.postgres.slot.current_wal_lsn` returned earlier is always
    fine): logical decoding reads only flushed WAL.

Rows
    Each table's changes come out as its net result over the batch (:class:`TableChanges`):
    one row per key touched, its last state. An UPDATE that changes the primary key is
    a DELETE of the old key and a PUT of the new one. A column PostgreSQL sent as
    unchanged TOAST takes its value from an earlier change of the same row in the
    batch, or else is listed in ``_unchanged`` for the job to fill from its copy of the
    row (the row that had key ``_prev_key`` before the batch). A TRUNCATE drops
    everything before it. Columns that differ from the job's (ALTER TABLE) stop the
    batch with a one-line StateError before anything is returned.

Memory
    Changes are decoded into Arrow chunks of ``chunk_rows`` rows per table (their
    values still as PostgreSQL's text); Python objects live for one chunk only. The
    net result is computed with Arrow at the end and only its rows are typed.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from deltamv.errors import StateError
from deltamv.postgres._convert import typed_column
from deltamv.postgres.catalog import PG_TYPES, PgTable
from deltamv.postgres.keys import row_keys
from deltamv.postgres.lsn import format_lsn
from deltamv.postgres.pgoutput import (
    UNCHANGED,
    Relation,
    Truncate,
    Value,
    decode,
    decode_tuple,
)
from deltamv.postgres.slot import check_slot, current_wal_lsn, slot_error
from deltamv.postgres.timestamps import commit_tso, pg_time_to_unix_us
from deltamv.schema import change_column

__all__ = [
    "ChangeBatch",
    "TableChanges",
    "TransactionInfo",
    "batch_upper",
    "changes_schema",
    "column_diff",
    "peek_messages",
    "read_changes",
    "transactions",
]

PUT, DELETE = 0, 1
_OPS = pa.array(["PUT", "DELETE"])


def changes_schema(table: PgTable) -> pa.Schema:
    """The schema of :attr:`TableChanges.rows`: ``_key``, ``_op``, the table's columns
    (all nullable; named by ``schema.change_column``), ``_unchanged`` and ``_prev_key``."""
    return pa.schema(
        [
            pa.field("_key", pa.string(), False),
            pa.field("_op", pa.string(), False),
            *(pa.field(change_column(c.name), c.arrow_type(), True) for c in table.schema.columns),
            pa.field("_unchanged", pa.list_(pa.string()), False),
            pa.field("_prev_key", pa.string(), True),
        ]
    )


@dataclass(frozen=True)
class TableChanges:
    """The net change of one table over a batch.

    ``truncated``: a TRUNCATE of the table happened in the batch; ``rows`` are what
    came after the last one (the job empties the table first, then applies them).

    ``rows`` (:func:`changes_schema`): one row per ``_key`` touched, its last state, in
    commit order. ``_op`` is ``PUT`` (the row exists with these values) or ``DELETE``
    (it does not; at least its key columns are set). ``_unchanged`` names the columns
    PostgreSQL left out as unchanged TOAST whose value no earlier change in the batch
    gave: they are null here and keep the value of the row that had key ``_prev_key``
    before the batch (``_key`` itself unless the row's primary key changed); empty
    when none, and then ``_prev_key`` is null.
    """

    truncated: bool
    rows: pa.Table


@dataclass(frozen=True)
class ChangeBatch:
    """The transactions with ``after_lsn <= commit_lsn < upto_lsn`` (module docstring).

    ``tables`` holds only the tables touched. ``transactions`` and ``changes`` count
    what was read (changes: inserts, updates, deletes, truncates of the job's tables).
    ``last_*`` describe the batch's last transaction (None for an empty batch):
    ``last_tso`` is its timestamp by :func:`deltamv.postgres.timestamps.commit_tso`,
    folded over every transaction of the batch from ``previous_tso``.
    """

    tables: Mapping[str, TableChanges]
    transactions: int
    changes: int
    last_commit_lsn: int | None
    last_end_lsn: int | None
    last_commit_time_us: int | None
    last_tso: int | None


@dataclass(frozen=True)
class TransactionInfo:
    """One committed transaction of the slot (for inspection)."""

    commit_lsn: int
    end_lsn: int
    commit_time_us: int  # since the Unix epoch
    xid: int
    changes: int  # inserts, updates, deletes and truncates in it (all published tables)


def batch_upper(after_lsn: int, latest_lsn: int, max_bytes: int | None) -> int:
    """The ``upto_lsn`` of the next batch: ``latest_lsn``, or at most ``max_bytes`` of
    WAL past ``after_lsn``. Never below ``after_lsn``. A transaction is never split:
    it belongs to the batch its commit record starts in, whatever its size."""
    if max_bytes is not None and max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    upper = latest_lsn if max_bytes is None else min(latest_lsn, after_lsn + max_bytes)
    return max(upper, after_lsn)


# -- reading the slot -------------------------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_COMMIT = struct.Struct(">bqqq")


def peek_messages(
    conn: psycopg.Connection[Any], slot: str, publication: str, upto_lsn: int
) -> Generator[bytes, None, None]:
    """The pgoutput (protocol 1) messages of the slot's transactions whose commit starts
    below ``upto_lsn``, from the slot's confirmed position on, without consuming them.

    Runs ``pg_logical_slot_peek_binary_changes`` through a server-side cursor, fetching
    ``_FETCH`` messages per round trip (measured faster than ``COPY ... (FORMAT
    binary)``: psycopg hands out one COPY message per call), in a transaction of its
    own on ``conn``. Errors on the slot become one-line StateErrors (invalidated,
    missing, in use); others are psycopg's.
    """
    pub = sql.Identifier(publication).as_string(conn)  # publication_names are identifiers
    query = sql.SQL(
        "SELECT data FROM pg_logical_slot_peek_binary_changes({}, {}::pg_lsn, NULL, "
        "'proto_version', '1', 'publication_names', {})"
    ).format(sql.Literal(slot), sql.Literal(format_lsn(upto_lsn)), sql.Literal(pub))
    try:
        with conn.transaction(), conn.cursor(name="deltamv_peek", binary=True) as cur:
            cur.execute(query)
            while rows := cur.fetchmany(_FETCH):
                for (data,) in rows:
                    yield data
    except psycopg.Error as e:
        known = slot_error(slot, e)
        if known is not None:
            raise known from None
        raise  # a lost connection: the caller's to open again (``connect.Reconnecting``)


_FETCH = 10_000


def transactions(
    conn: psycopg.Connection[Any], slot: str, publication: str, after_lsn: int, upto_lsn: int
) -> Iterator[TransactionInfo]:
    """The slot's transactions with ``after_lsn <= commit_lsn < upto_lsn`` (read only)."""
    begin: tuple[int, int, int] | None = None
    count = 0
    with closing(peek_messages(conn, slot, publication, upto_lsn)) as messages:
        for data in messages:
            kind = data[0]
            if kind == 0x42:  # Begin
                final_lsn, commit_time, xid = struct.unpack_from(">qqI", data, 1)
                begin = (final_lsn, commit_time, xid) if after_lsn <= final_lsn < upto_lsn else None
                count = 0
            elif kind in (0x49, 0x55, 0x44, 0x54):
                count += 1
            elif kind == 0x43 and begin is not None:  # Commit
                _, commit_lsn, end_lsn, commit_time = struct.unpack_from(">bqqq", data, 1)
                yield TransactionInfo(
                    commit_lsn, end_lsn, pg_time_to_unix_us(commit_time), begin[2], count
                )
                begin = None


# -- net changes ------------------------------------------------------------------


class _Table:
    """The events of one table in a batch, in Arrow chunks of PostgreSQL text."""

    def __init__(self, table: PgTable, chunk_rows: int) -> None:
        self.table = table
        self.chunk_rows = chunk_rows
        self.width = len(table.pg_columns)
        self.expected = tuple((c.name, c.type_oid, c.typmod) for c in table.pg_columns)
        names = [c.name for c in table.pg_columns]
        self.pk_index = [names.index(k) for k in table.primary_key]
        self.problem: str | None = None  # set when the current Relation does not match
        self.truncated = False
        self.chunks: list[pa.RecordBatch] = []
        self._reset()

    def _reset(self) -> None:
        self.seq: list[int] = []
        self.op: list[int] = []
        self.unch: list[str] = []
        self.src: list[int] = []
        self.values: list[list[bytes | None]] = [[] for _ in range(self.width)]

    def relation(self, rel: Relation) -> None:
        got = tuple((c.name, c.type_oid, c.typmod) for c in rel.columns)
        q = self.table.qualified
        if got != self.expected:
            self.problem = (
                f"columns of {q} changed while the job runs: {column_diff(self.expected, got)}; "
                "nothing of this batch is committed (restart the job from a new snapshot "
                "to take the new columns)"
            )
            return
        keys = {c.name for c in rel.columns if c.key}
        identity = rel.replica_identity
        if identity == "n" or (identity in ("d", "i") and keys != set(self.table.primary_key)):
            self.problem = (
                f"replica identity of {q} changed while the job runs (now "
                f"{identity!r} on {sorted(keys)}), so deletes would not carry its primary "
                "key; nothing of this batch is committed"
            )
            return
        self.problem = None

    def add(self, seq: int, op: int, values: list[Value], src: int = -1) -> None:
        unchanged = ""
        for i in range(self.width):
            v = values[i]
            if v is UNCHANGED:
                unchanged = f"{unchanged},{i}" if unchanged else str(i)
                v = None
            self.values[i].append(v)  # type: ignore[arg-type]
        self.seq.append(seq)
        self.op.append(op)
        self.unch.append(unchanged)
        self.src.append(src)
        if len(self.seq) >= self.chunk_rows:
            self.flush()

    def append(self, data: bytes, pos: int, seq: int) -> None:
        """A PUT of the TupleData at ``data[pos:]``, read straight into the columns
        (the hot path: inserts, and updates that carry no old row)."""
        (count,) = _I16.unpack_from(data, pos)
        pos += 2
        if count != self.width:
            raise StateError(
                f"a change of {self.table.qualified} has {count} columns, the job's "
                f"{self.width}; nothing of this batch is committed"
            )
        columns = self.values
        unchanged = ""
        for i in range(count):
            kind = data[pos]
            if kind == 0x74:  # 't'
                (length,) = _I32.unpack_from(data, pos + 1)
                pos += 5
                columns[i].append(data[pos : pos + length])
                pos += length
                continue
            pos += 1
            columns[i].append(None)
            if kind == 0x75:  # 'u': unchanged TOAST
                if i in self.pk_index:
                    raise StateError(
                        f"a change of {self.table.qualified} does not carry its primary "
                        "key; nothing of this batch is committed"
                    )
                unchanged = f"{unchanged},{i}" if unchanged else str(i)
            elif kind != 0x6E:  # 'n'
                raise StateError(
                    f"unexpected column kind {kind!r} in a change of {self.table.qualified}"
                )
        self.seq.append(seq)
        self.op.append(PUT)
        self.unch.append(unchanged)
        self.src.append(-1)
        if len(self.seq) >= self.chunk_rows:
            self.flush()

    def truncate(self) -> None:
        self.truncated = True
        self.chunks.clear()
        self._reset()

    def flush(self) -> None:
        if not self.seq:
            return
        raw = [pa.array(v, pa.binary()) for v in self.values]
        table = self.table
        pk_cols = [table.schema.column(k) for k in table.primary_key]
        typed = {
            k: typed_column(raw[i], table.pg_columns[i], c, table)  # type: ignore[arg-type]
            for k, i, c in zip(table.primary_key, self.pk_index, pk_cols, strict=True)
        }
        keys = row_keys(table.name, table.schema, table.primary_key, pa.table(typed))
        self.chunks.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(self.seq, pa.int64()),
                    keys,
                    pa.array(self.op, pa.int8()),
                    pa.array(self.unch, pa.string()),
                    pa.array(self.src, pa.int64()),
                    *raw,
                ],
                names=["_seq", "_key", "_op", "_unch", "_src"]
                + [f"c{i}" for i in range(self.width)],
            )
        )
        self._reset()

    def result(self) -> TableChanges:
        self.flush()
        table = self.table
        schema = changes_schema(table)
        if not self.chunks:
            return TableChanges(self.truncated, schema.empty_table())
        events = pa.Table.from_batches(self.chunks)
        self.chunks = []
        if pc.count_distinct(events["_key"]).as_py() == events.num_rows:
            final = events  # every key once: nothing to collapse (a big update, a load)
        else:  # the last change per key; filter keeps commit order
            last = events.group_by("_key", use_threads=False).aggregate([("_seq", "max")])
            final = events.filter(pc.is_in(events["_seq"], value_set=last["_seq_max"]))
        final, prev_keys = self._fill_unchanged(events, final)
        del events
        names = [c.name for c in table.pg_columns]
        columns = []
        for col in table.schema.columns:
            i = names.index(col.name)
            raw = final[f"c{i}"].combine_chunks()
            columns.append(typed_column(raw, table.pg_columns[i], col, table))
            final = final.drop_columns([f"c{i}"])  # free the text as soon as it is typed
        ops = _OPS.take(final["_op"].combine_chunks().cast(pa.int32()))
        unchanged = _unchanged_lists(final["_unch"].combine_chunks(), names)
        rows = pa.Table.from_arrays(
            [final["_key"].combine_chunks(), ops, *columns, unchanged, prev_keys], schema=schema
        )
        return TableChanges(self.truncated, rows)

    def _fill_unchanged(self, events: pa.Table, final: pa.Table) -> tuple[pa.Table, pa.Array]:
        """Fill unchanged TOAST values from earlier changes of the same row in the batch
        (following primary-key moves); name the row whose old values fill the rest."""
        has_unch = pc.not_equal(final["_unch"], "")
        if not pc.any(has_unch).as_py():
            return final, pa.nulls(final.num_rows, pa.string())
        # Rows whose only change in the batch is this one keep their own old values.
        keys = pc.filter(final["_key"], has_unch)
        involved = events.filter(pc.is_in(events["_key"], value_set=keys))
        moved = pc.any(pc.not_equal(involved["_src"], -1)).as_py()
        if involved.num_rows == len(keys) and not moved:
            return final, pc.if_else(has_unch, final["_key"], pa.scalar(None, pa.string()))
        # Otherwise walk those rows' changes (and their earlier keys') in commit order.
        key_set = set(keys.to_pylist())
        seq_key: dict[int, str] = {}  # the key of each move's old-key DELETE, by seq
        while True:
            involved = events.filter(pc.is_in(events["_key"], value_set=pa.array(sorted(key_set))))
            referenced = {s for s in involved["_src"].to_pylist() if s != -1}
            missing = pa.array(sorted(referenced - seq_key.keys()), pa.int64())
            if len(missing):
                found = events.filter(pc.is_in(events["_seq"], value_set=missing))
                seq_key.update(
                    zip(found["_seq"].to_pylist(), found["_key"].to_pylist(), strict=True)
                )
            sources = {seq_key[s] for s in referenced}
            if sources <= key_set:
                break
            key_set |= sources
        states: dict[str, tuple[list[bytes | None], set[int], str] | None] = {}
        before_delete: dict[int, tuple[list[bytes | None], set[int], str] | None] = {}
        width = self.width
        for ev in involved.to_pylist():
            key = ev["_key"]
            if ev["_op"] == DELETE:
                if ev["_seq"] in referenced:
                    before_delete[ev["_seq"]] = states.get(key)
                states[key] = None
                continue
            values = [ev[f"c{i}"] for i in range(width)]
            unch = {int(i) for i in ev["_unch"].split(",")} if ev["_unch"] else set()
            if ev["_src"] != -1:
                base, origin = before_delete.get(ev["_src"]), seq_key[ev["_src"]]
            else:
                base, origin = states.get(key), key
            unknown: set[int] = set()
            for i in unch:
                if base is not None and i not in base[1]:
                    values[i] = base[0][i]
                else:
                    unknown.add(i)
            if unknown and base is not None and base[1]:
                origin = base[2]
            states[key] = (values, unknown, origin)
        fix = pc.is_in(final["_key"], value_set=pa.array(sorted(key_set)))
        fixed = final.filter(fix).to_pylist()
        for row in fixed:
            state = states.get(row["_key"])
            if row["_op"] == PUT and state is not None:
                for i in range(width):
                    row[f"c{i}"] = state[0][i]
                row["_unch"] = ",".join(str(i) for i in sorted(state[1]))
                row["_prev"] = state[2] if state[1] else None
            else:
                row["_prev"] = None
        kept = final.filter(pc.invert(fix))
        kept_prev = pc.if_else(
            pc.not_equal(kept["_unch"], ""), kept["_key"], pa.scalar(None, pa.string())
        )
        kept = kept.append_column("_prev", kept_prev)
        fixed_table = pa.Table.from_pylist(fixed, schema=kept.schema)
        merged = pa.concat_tables([kept, fixed_table]).sort_by("_seq")
        return merged.drop_columns(["_prev"]), merged["_prev"].combine_chunks()


def _unchanged_lists(unch: pa.Array, names: Sequence[str]) -> pa.Array:
    distinct = pc.unique(unch)
    lists = pa.array(
        [[names[int(i)] for i in s.split(",")] if s else [] for s in distinct.to_pylist()],
        pa.list_(pa.string()),
    )
    return lists.take(pc.index_in(unch, value_set=distinct))


def _type_text(type_oid: int, typmod: int) -> str:
    name = PG_TYPES.get(type_oid, (f"type {type_oid}",))[0]
    if type_oid == 1700 and typmod >= 4:
        return f"{name}({((typmod - 4) >> 16) & 0xFFFF},{(typmod - 4) & 0x7FF})"
    return name


def column_diff(
    expected: tuple[tuple[str, int, int], ...], got: tuple[tuple[str, int, int], ...]
) -> str:
    """How columns ``(name, type OID, typmod)`` changed from ``expected`` to ``got``, as
    one line (``added extra text, dropped v``)."""
    old = {n: (t, m) for n, t, m in expected}
    new = {n: (t, m) for n, t, m in got}
    parts = [f"added {n} {_type_text(*new[n])}" for n in new if n not in old]
    parts += [f"dropped {n}" for n in old if n not in new]
    parts += [
        f"{n} is now {_type_text(*new[n])} (was {_type_text(*old[n])})"
        for n in new
        if n in old and new[n] != old[n]
    ]
    if not parts:
        parts = [f"columns reordered to ({', '.join(n for n, _, _ in got)})"]
    return ", ".join(parts)


def read_changes(
    conn: psycopg.Connection[Any],
    slot: str,
    publication: str,
    tables: Sequence[PgTable],
    *,
    after_lsn: int,
    upto_lsn: int,
    previous_tso: int = 0,
    chunk_rows: int = 65536,
    first_only: bool = False,
) -> ChangeBatch:
    """The net changes of the transactions with ``after_lsn <= commit_lsn < upto_lsn``
    (module docstring), read without consuming them: the slot does not move.
    ``first_only``: of the first of them alone (the next batch starts at its
    ``last_end_lsn``).

    ``conn`` is a regular connection (autocommit, :func:`deltamv.postgres.connect.connect`)
    to the slot's database. Raises one-line StateErrors, before returning anything,
    when the slot is invalidated or missing, a table left the publication (dropped or
    recreated), or a table's columns or replica identity changed in the batch.
    """
    if upto_lsn < after_lsn:
        raise ValueError(
            f"upto_lsn {format_lsn(upto_lsn)} is below after_lsn {format_lsn(after_lsn)}"
        )
    status = check_slot(conn, slot)
    flushed = current_wal_lsn(conn)
    if upto_lsn > flushed:
        raise StateError(
            f"batch end {format_lsn(upto_lsn)} lies beyond the WAL PostgreSQL has flushed "
            f"({format_lsn(flushed)}); a transaction committing in between could be missed"
        )
    _check_published(conn, publication, tables)
    accs = {t.oid: _Table(t, chunk_rows) for t in tables}
    empty = ChangeBatch({}, 0, 0, None, None, None, None)
    confirmed = status.confirmed_flush_lsn or 0
    if confirmed > after_lsn:
        raise StateError(
            f"replication slot {slot} is confirmed at {format_lsn(confirmed)}, past the "
            f"batch start {format_lsn(after_lsn)}: the transactions in between are no "
            "longer available (was the slot advanced by something else?)"
        )
    if upto_lsn == after_lsn:
        return empty
    names = {(t.namespace, t.relname): t for t in tables}
    foreign: dict[int, str] = {}  # relids named like a job table but of another OID
    include = False
    seq = 0
    txns = changes = 0
    last_lsn = last_end = last_time = last_tso = None
    tso = previous_tso
    touched: set[int] = set()
    # closing(): an error stops the read at once, and ends the peek's transaction with it
    with closing(peek_messages(conn, slot, publication, upto_lsn)) as messages:
        for data in messages:
            kind = data[0]
            if kind in (0x49, 0x55, 0x44):  # Insert, Update, Delete
                if not include:
                    continue
                (relid,) = _U32.unpack_from(data, 1)
                acc = accs.get(relid)
                if acc is None:
                    if relid in foreign:
                        raise StateError(foreign[relid])
                    continue
                if acc.problem:
                    raise StateError(acc.problem)
                changes += 1
                touched.add(relid)
                if kind == 0x49 or data[5] == 0x4E:  # an insert, or an update without old row
                    seq += 1
                    acc.append(data, 6, seq)
                elif kind == 0x44:
                    old, _ = decode_tuple(data, 6)
                    seq += 1
                    acc.add(seq, DELETE, _key_only(acc, old))
                else:
                    seq = _update(acc, data, seq)
            elif kind == 0x42:  # Begin
                (final_lsn,) = _I64.unpack_from(data, 1)
                include = after_lsn <= final_lsn < upto_lsn
            elif kind == 0x43:  # Commit
                if include:
                    _, commit_lsn, end_lsn, commit_time = _COMMIT.unpack_from(data, 1)
                    txns += 1
                    last_lsn, last_end = commit_lsn, end_lsn
                    last_time = pg_time_to_unix_us(commit_time)
                    tso = commit_tso(last_time, tso)
                    last_tso = tso
                    if first_only:
                        break
                include = False
            elif kind == 0x52:  # Relation: applies from here on, included transaction or not
                rel = decode(data)
                assert isinstance(rel, Relation)
                if rel.relid in accs:
                    accs[rel.relid].relation(rel)
                elif (rel.namespace or "pg_catalog", rel.name) in names:
                    t = names[(rel.namespace or "pg_catalog", rel.name)]
                    foreign[rel.relid] = (
                        f"table {t.qualified} was dropped and created again while the job runs "
                        f"(OID {rel.relid}, the job's is {t.oid}); nothing of this batch is committed"
                    )
            elif kind == 0x54:  # Truncate
                if not include:
                    continue
                msg = decode(data)
                assert isinstance(msg, Truncate)
                for relid in msg.relids:
                    if relid in accs:
                        changes += 1
                        touched.add(relid)
                        accs[relid].truncate()
            # Origin and Type messages carry nothing deltamv uses.
    if txns == 0:
        return empty
    out = {accs[r].table.name: accs[r].result() for r in sorted(touched)}
    return ChangeBatch(out, txns, changes, last_lsn, last_end, last_time, last_tso)


def _key_only(acc: _Table, old: list[Value]) -> list[Value]:
    """The old row of a delete, with its key columns checked (never unchanged TOAST)."""
    for i in acc.pk_index:
        if old[i] is UNCHANGED or old[i] is None:
            raise StateError(
                f"a change of {acc.table.qualified} does not carry its primary key "
                f"({', '.join(acc.table.primary_key)}); nothing of this batch is committed"
            )
    return [None if v is UNCHANGED else v for v in old]


def _update(acc: _Table, data: bytes, seq: int) -> int:
    pos = 5
    old: list[Value] | None = None
    if data[pos] in (0x4B, 0x4F):  # 'K' or 'O'
        old, pos = decode_tuple(data, pos + 1)
    new, _ = decode_tuple(data, pos + 1)
    for i in acc.pk_index:
        if new[i] is UNCHANGED:  # a TOASTed key column PostgreSQL left out
            if old is None or old[i] is UNCHANGED:
                _key_only(acc, new)
            new[i] = old[i]  # type: ignore[index]
    if old is not None and any(old[i] != new[i] for i in acc.pk_index):
        # The primary key changed: the old key's row is gone, the new key's row takes
        # its values (unchanged TOAST columns included: they fill from the old key).
        seq += 1
        acc.add(seq, DELETE, _key_only(acc, old))
        seq += 1
        acc.add(seq, PUT, new, src=seq - 1)
        return seq
    seq += 1
    acc.add(seq, PUT, new)
    return seq


def _check_published(
    conn: psycopg.Connection[Any], publication: str, tables: Sequence[PgTable]
) -> None:
    rows = conn.execute(
        """SELECT c.oid::int8 FROM pg_publication_tables pt
           JOIN pg_namespace n ON n.nspname = pt.schemaname
           JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
           WHERE pt.pubname = %s""",
        [publication],
    ).fetchall()
    published = {r[0] for r in rows}
    for t in tables:
        if t.oid not in published:
            raise StateError(
                f"table {t.qualified} (OID {t.oid}) is no longer in publication {publication} "
                "(dropped, created again, or removed from it); nothing of this batch is committed"
            )
