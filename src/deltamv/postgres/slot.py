"""The replication slot and publication a job reads PostgreSQL through.

The publication names the tables whose changes pgoutput sends; the logical slot
(plugin ``pgoutput``) keeps the WAL of every transaction the job has not confirmed
yet, and the slot's ``confirmed_flush_lsn`` is the job's position: every transaction
whose commit record starts below it has been applied. The slot only moves when
:func:`advance_slot` is called, which the job does after every Delta commit of a
batch; until then PostgreSQL retains the WAL (see :class:`SlotStatus`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from deltamv.errors import ConfigError, StateError
from deltamv.postgres.catalog import PgTable
from deltamv.postgres.connect import connect
from deltamv.postgres.lsn import format_lsn, parse_lsn

__all__ = [
    "ExportedSnapshot",
    "SlotOrigin",
    "SlotStatus",
    "advance_slot",
    "check_slot",
    "create_slot",
    "created_as",
    "current_wal_lsn",
    "drop_publication",
    "drop_slot",
    "ensure_publication",
    "slot_error",
    "slot_origin",
    "slot_status",
]

_LOST_TEXT = ("has been invalidated", "cannot read from logical replication slot",
              "has not previously reserved wal", "this slot has been invalidated")  # fmt: skip


def _lost(slot: str) -> StateError:
    return StateError(
        f"replication slot {slot} lost WAL it still needed (PostgreSQL invalidated it, "
        "wal_status 'lost': max_slot_wal_keep_size was exceeded while the job lagged or "
        "was stopped); the views can no longer follow the database: retire the job's "
        "slot and publication and start the job anew from a fresh snapshot"
    )


_GONE = (
    " (dropped outside deltamv?): the changes since the job's last batch are lost to it;"
    " start the job with a new checkpoint and new output paths"
)


def slot_error(slot: str, exc: psycopg.Error) -> StateError | None:
    """The one-line StateError for an error PostgreSQL raised using ``slot``, when it
    says the slot is invalidated, missing or in use; None for any other error."""
    text = str(exc).lower()
    if any(t in text for t in _LOST_TEXT):
        return _lost(slot)
    if "does not exist" in text and "replication slot" in text:
        return StateError(f"replication slot {slot} does not exist{_GONE}")
    if "is active for pid" in text:
        return SlotInUseError(
            f"replication slot {slot} is in use by another connection "
            "(is another job running with the same slot?)"
        )
    return None


class SlotInUseError(StateError):
    """Another connection holds the slot (PostgreSQL's "is active for PID")."""


@dataclass(frozen=True)
class SlotStatus:
    """A slot as ``pg_replication_slots`` shows it, LSNs as ints.

    ``retained_bytes`` is the WAL PostgreSQL keeps for the slot (current WAL LSN -
    ``restart_lsn``); ``lag_bytes`` how far the job trails (current - confirmed). Both
    are None when the slot is invalidated (``wal_status == "lost"``).
    """

    name: str
    plugin: str
    database: str
    active: bool
    restart_lsn: int | None
    confirmed_flush_lsn: int | None
    wal_status: str | None  # reserved, extended, unreserved, lost (PostgreSQL 13+)
    current_lsn: int
    retained_bytes: int | None
    lag_bytes: int | None

    @property
    def lost(self) -> bool:
        """PostgreSQL removed WAL this slot needs: it can never be read again."""
        return self.wal_status == "lost" or self.restart_lsn is None


def _lsn(text: str | None) -> int | None:
    return parse_lsn(text) if text is not None else None


def current_wal_lsn(conn: psycopg.Connection[Any]) -> int:
    """The WAL position flushed to disk now: everything logical decoding can read."""
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def slot_status(conn: psycopg.Connection[Any], slot: str) -> SlotStatus | None:
    """The status of ``slot``, or None when no such slot exists. Read-only."""
    wal_status = "wal_status" if conn.info.server_version >= 130000 else "NULL::text"
    row = conn.execute(
        f"""SELECT slot_name::text, coalesce(plugin::text, ''), coalesce(database::text, ''),
                   active, restart_lsn::text, confirmed_flush_lsn::text, {wal_status},
                   pg_current_wal_flush_lsn()::text
            FROM pg_replication_slots WHERE slot_name = %s""",
        [slot],
    ).fetchone()
    if row is None:
        return None
    name, plugin, database, active, restart, confirmed, status, current = row
    restart_lsn, confirmed_lsn, current_lsn = _lsn(restart), _lsn(confirmed), parse_lsn(current)
    lost = status == "lost" or restart_lsn is None
    return SlotStatus(
        name=name,
        plugin=plugin,
        database=database,
        active=bool(active),
        restart_lsn=restart_lsn,
        confirmed_flush_lsn=confirmed_lsn,
        wal_status=status,
        current_lsn=current_lsn,
        retained_bytes=None if lost or restart_lsn is None else max(0, current_lsn - restart_lsn),
        lag_bytes=None if lost or confirmed_lsn is None else max(0, current_lsn - confirmed_lsn),
    )


def check_slot(
    conn: psycopg.Connection[Any], slot: str, *, database: str | None = None
) -> SlotStatus:
    """The status of ``slot`` if the job can read it; otherwise a one-line StateError:
    missing, invalidated (lost WAL), not a pgoutput slot, or of another database."""
    status = slot_status(conn, slot)
    if status is None:
        where = f"host={conn.info.host} port={conn.info.port} dbname={conn.info.dbname}"
        raise StateError(f"replication slot {slot} does not exist at {where}{_GONE}")
    if status.lost:
        raise _lost(slot)
    if status.plugin != "pgoutput":
        raise StateError(f"replication slot {slot} uses plugin {status.plugin!r}, not pgoutput")
    db = database or conn.info.dbname
    if status.database != db:
        raise StateError(f"replication slot {slot} belongs to database {status.database}, not {db}")
    return status


def advance_slot(conn: psycopg.Connection[Any], slot: str, lsn: int) -> int:
    """Confirm everything below ``lsn``: PostgreSQL may then drop that WAL, and the
    slot no longer returns transactions whose commit starts below ``lsn``.

    Idempotent and never moves the slot back: at or below the confirmed position it
    does nothing. Returns the confirmed position after the call. PostgreSQL writes the
    new position to disk at its next checkpoint, so after a server crash the slot can
    come back at an older position: readers drop what they already applied by commit
    LSN. Raises StateError if the slot is missing, invalidated or in use.
    """
    status = check_slot(conn, slot)
    confirmed = status.confirmed_flush_lsn or 0
    if lsn <= confirmed:
        return confirmed
    try:
        row = conn.execute(
            "SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
            [slot, format_lsn(lsn)],
        ).fetchone()
    except psycopg.Error as e:
        known = slot_error(slot, e)
        if known is not None:
            raise known from None
        raise
    assert row is not None
    return parse_lsn(row[0])


@dataclass(frozen=True)
class ExportedSnapshot:
    """A slot just created, and the snapshot PostgreSQL exported with it.

    Every transaction that committed before ``consistent_lsn`` is in the snapshot; the
    slot returns exactly those that commit at or after it. ``snapshot_name`` is valid
    only while the creating connection stays open (inside :func:`create_slot`).
    """

    slot: str
    snapshot_name: str
    consistent_lsn: int


@contextmanager
def create_slot(dsn: str, slot: str, *, timeout_s: float = 60.0) -> Iterator[ExportedSnapshot]:
    """Create the logical slot ``slot`` (plugin ``pgoutput``) with an exported snapshot.

    Opens a ``replication=database`` connection, runs ``CREATE_REPLICATION_SLOT ...
    (SNAPSHOT 'export')`` and keeps the connection open for the ``with`` block: import
    the snapshot (:func:`deltamv.postgres.snapshot.snapshot_transaction`) inside it.
    The slot stays when the block ends or raises (drop it with :func:`drop_slot` if
    the copy is abandoned). Raises StateError if the slot exists already.
    """
    conn = connect(dsn, timeout_s=timeout_s, replication=True)
    try:
        name = sql.Identifier(slot).as_string(conn)
        if conn.info.server_version >= 150000:
            command = f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput (SNAPSHOT 'export')"
        else:
            command = f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput EXPORT_SNAPSHOT"
        try:
            row = conn.execute(command).fetchone()
        except psycopg.errors.DuplicateObject:
            raise StateError(
                f"replication slot {slot} already exists; a job starting from a snapshot "
                "needs a new one (drop the old slot first)"
            ) from None
        except psycopg.Error as e:  # no REPLICATION attribute, no free slot, wal_level
            raise StateError(
                f"cannot create replication slot {slot}: {' '.join(str(e).split())}"
            ) from None
        assert row is not None
        _, consistent, snapshot_name, _ = row
        yield ExportedSnapshot(slot, str(snapshot_name), parse_lsn(str(consistent)))
    finally:
        conn.close()


@dataclass(frozen=True)
class SlotOrigin:
    """Which slot instance a job created: kept by the job (durably) *before* it creates
    the slot, with ``consistent_lsn`` None, and again right after, with the consistent
    point CREATE_REPLICATION_SLOT returned. A slot's name says nothing about who made
    it; this lets a job's next start tell its own slot, left by a start that did not
    finish, from one somebody else made under the same name (:func:`created_as`).

    ``wal_before`` is the WAL flushed just before the slot was created.
    """

    slot: str
    system_identifier: str
    database: str
    wal_before: int
    consistent_lsn: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "system_identifier": self.system_identifier,
            "database": self.database,
            "wal_before": format_lsn(self.wal_before),
            "consistent_lsn": None
            if self.consistent_lsn is None
            else format_lsn(self.consistent_lsn),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SlotOrigin:
        consistent = data.get("consistent_lsn")
        return cls(
            slot=str(data["slot"]),
            system_identifier=str(data["system_identifier"]),
            database=str(data["database"]),
            wal_before=parse_lsn(str(data["wal_before"])),
            consistent_lsn=None if consistent is None else parse_lsn(str(consistent)),
        )


def _system_identifier(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
    assert row is not None
    return str(row[0])


def slot_origin(conn: psycopg.Connection[Any], slot: str) -> SlotOrigin:
    """The origin to keep before creating ``slot`` over ``conn``'s database: the
    server's system identifier, the database and the WAL flushed now. Read-only."""
    return SlotOrigin(slot, _system_identifier(conn), conn.info.dbname, current_wal_lsn(conn))


def created_as(conn: psycopg.Connection[Any], status: SlotStatus, origin: SlotOrigin) -> bool:
    """Whether the existing slot ``status`` is the one ``origin`` records, never moved
    since: the same name, server (system identifier), database and plugin, and

    - with ``consistent_lsn``: confirmed exactly there. A new logical slot is confirmed
      at its consistent point, which lies past the WAL of every slot created before
      it; so a slot made after this one was dropped is confirmed elsewhere, and so is
      this one once something consumed or advanced it.
    - without (the creator died before it kept the consistent point): restart and
      confirmed positions at or past ``wal_before``, as of any slot created after it.
      A slot that existed before is refused before an origin is ever kept, so only one
      made under this name in the moment between the two is taken for this one.
    """
    if (status.name, status.database, status.plugin) != (origin.slot, origin.database,
                                                         "pgoutput"):  # fmt: skip
        return False
    if _system_identifier(conn) != origin.system_identifier:
        return False
    confirmed = status.confirmed_flush_lsn
    if origin.consistent_lsn is not None:
        return confirmed == origin.consistent_lsn
    return (
        confirmed is not None
        and confirmed >= origin.wal_before
        and (status.restart_lsn is None or status.restart_lsn >= origin.wal_before)
    )


def drop_slot(conn: psycopg.Connection[Any], slot: str, *, wait_s: float = 10.0) -> bool:
    """Drop ``slot`` (PostgreSQL then frees the WAL it held). False if it did not
    exist. A slot in use is waited for up to ``wait_s`` seconds (the server process of
    a connection just closed, or of a killed job, may hold it a moment longer); then
    raises StateError."""
    end = time.monotonic() + wait_s
    while True:
        status = slot_status(conn, slot)
        if status is None:
            return False
        if not status.active or time.monotonic() >= end:
            break
        time.sleep(0.1)
    try:
        conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])
    except psycopg.Error as e:
        known = slot_error(slot, e)
        if known is not None:
            raise known from None
        raise
    return True


def drop_publication(conn: psycopg.Connection[Any], publication: str) -> bool:
    """Drop ``publication`` if it exists (idempotent); whether it existed."""
    query = "SELECT 1 FROM pg_publication WHERE pubname = %s"
    existed = conn.execute(query, [publication]).fetchone() is not None
    conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))
    return existed


def ensure_publication(
    conn: psycopg.Connection[Any], publication: str, tables: Sequence[PgTable]
) -> bool:
    """Create ``publication`` ``FOR TABLE`` the tables if it is missing (True), or check
    that the existing one sends everything deltamv needs of them (False): inserts,
    updates, deletes and truncates of every table, no row filter, every column.
    One-line ConfigError (key ``source.publication``) otherwise."""
    key = "source.publication"
    row = conn.execute(
        """SELECT pubinsert AND pubupdate AND pubdelete AND pubtruncate
           FROM pg_publication WHERE pubname = %s""",
        [publication],
    ).fetchone()
    if row is None:
        # ONLY: a table's inheritance children are not the table (the copy reads ONLY too)
        targets = sql.SQL(", ").join(
            sql.SQL("ONLY {}").format(sql.Identifier(t.namespace, t.relname)) for t in tables
        )
        command = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
            sql.Identifier(publication), targets
        )
        try:
            conn.execute(command)
        except psycopg.Error as e:
            raise ConfigError(
                key, f"cannot create publication {publication}: {' '.join(str(e).split())}"
            ) from None
        if not conn.autocommit:
            conn.commit()
        return True
    if not row[0]:
        raise ConfigError(
            key,
            f"publication {publication} does not publish every insert, update, delete "
            "and truncate (publish = 'insert, update, delete, truncate' is needed)",
        )
    extra = ", attnames, rowfilter" if conn.info.server_version >= 150000 else ""
    published = {
        (r[0], r[1]): r[2:]
        for r in conn.execute(
            f"SELECT schemaname::text, tablename::text{extra} FROM pg_publication_tables "
            "WHERE pubname = %s",
            [publication],
        ).fetchall()
    }
    for t in tables:
        entry = published.get((t.namespace, t.relname))
        if entry is None:
            raise ConfigError(
                key,
                f"publication {publication} does not include table {t.qualified} "
                f"(ALTER PUBLICATION {publication} ADD TABLE {t.qualified})",
            )
        if entry:
            attnames, rowfilter = entry
            if rowfilter is not None:
                raise ConfigError(
                    key, f"publication {publication} filters the rows of {t.qualified}"
                )
            if attnames is not None and set(attnames) != {c.name for c in t.pg_columns}:
                raise ConfigError(
                    key, f"publication {publication} sends only some columns of {t.qualified}"
                )
    return False
