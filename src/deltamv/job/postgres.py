"""PostgreSQL as a job's upstream: snapshot, then the slot's transactions (docs/postgres.md).

- **Start.** The first run creates the publication (if missing) and a logical slot with
  an exported snapshot, copies every table inside that snapshot into the mirrors and
  publishes each output's first version at the snapshot's time. A run killed during the
  copy committed nothing and has a slot whose snapshot is gone: the next run drops the
  slot and starts over. It drops only a slot the checkpoint records it created
  (``postgres-slot.json``, kept before the slot is created); a first run finding any
  other slot under the job's slot name refuses and changes nothing.
- **Batches.** Spark's ``deltamv-postgres`` source plans them: a batch is the WAL range
  from the position the job's state recorded up to the batch's end offset, i.e. whole
  transactions in commit order. They are read (without consuming them) inside the
  batch's state transaction; the state records the new position, the last commit's TSO
  (the batch's watermark), LSN and time. The slot advances only once a batch is
  committed everywhere (the source's ``commit``, and at the end of a run).
- Every version carries ``deltamv.pg_lsn``, the commit LSN of the last transaction it
  includes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from deltamv import faults
from deltamv.compute import Compute
from deltamv.config import JobConfig, TableConfig
from deltamv.errors import StateError, StorageError
from deltamv.job.upstream import Lap, logged_offset
from deltamv.pipeline.ingest import IngestResult
from deltamv.postgres import (
    ChangeBatch,
    PgTable,
    SlotOrigin,
    TruncatedMeanwhile,
    advance_slot,
    connect,
    copy_tables,
    create_slot,
    created_as,
    current_wal_lsn,
    drop_publication,
    drop_slot,
    ensure_publication,
    format_lsn,
    read_catalog,
    read_changes,
    slot_origin,
    slot_status,
)
from deltamv.postgres.changes import column_diff
from deltamv.postgres.connect import Reconnecting, describe_dsn, one_line
from deltamv.postgres.slot import SlotInUseError
from deltamv.postgres.source import SOURCE_NAME
from deltamv.postgres.timestamps import commit_tso, server_time_us
from deltamv.state.store import StateStore

__all__ = [
    "ORIGIN_FILE",
    "PG_LSN_KEY",
    "PostgresUpstream",
    "Retired",
    "publication_name",
    "retire",
    "slot_name",
]

log = logging.getLogger("deltamv.job")

PG_LSN_KEY = "deltamv.pg_lsn"
_NOTHING = ChangeBatch({}, 0, 0, None, None, None, None)
_AFTER = "after_lsn"  # the batch start: every transaction committed below it is applied
_TSO = "last_tso"
_COMMIT_LSN = "last_commit_lsn"
_COMMIT_TIME = "last_commit_time_us"
_COLUMNS = "columns."  # + table name: its PostgreSQL columns at the snapshot
_OID = "oid."  # + table name: its PostgreSQL table's OID at the snapshot
_SNAPSHOT_TRIES = 5  # snapshots taken again when a table was truncated meanwhile
_CONFIRM_WAIT_S = 10.0  # at the end of a run, for the slot the source may still hold
ORIGIN_FILE = "postgres-slot.json"  # in the checkpoint: the slot this checkpoint created


def _columns(table: PgTable) -> tuple[tuple[str, int, int], ...]:
    return tuple((c.name, c.type_oid, c.typmod) for c in table.pg_columns)


def slot_name(config: JobConfig) -> str:
    return config.upstream.slot or _identifier(f"deltamv_{config.name}")


def publication_name(config: JobConfig) -> str:
    return config.upstream.publication or _identifier(f"deltamv_{config.name}")


def _identifier(text: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in text.lower())
    return out[:63]


class PostgresUpstream:
    """Reads a PostgreSQL database (see the module doc)."""

    def __init__(self, config: JobConfig, spark_checkpoint: Path) -> None:
        self.dsn = config.upstream.dsn or ""
        self.slot = slot_name(config)
        self.publication = publication_name(config)
        self.offset_log = spark_checkpoint / "offsets"
        self.checkpoint = Path(config.checkpoint)
        self.timeout = config.upstream.connect_timeout
        self._pg = Reconnecting(self.dsn, timeout_s=self.timeout)
        declared = {
            name: (t.schema if t.schema.columns else None, t.primary_key or None)
            for name, t in config.tables.items()
        }
        with connect(self.dsn, timeout_s=self.timeout) as conn:
            self.pg_tables: dict[str, PgTable] = read_catalog(
                conn, [(n, t.pg_table) for n, t in config.tables.items()], declared=declared
            )
        self.config = config.with_tables(
            {
                name: replace(t, schema=self.pg_tables[name].schema,
                              primary_key=tuple(self.pg_tables[name].primary_key))
                for name, t in config.tables.items()
            }
        )  # fmt: skip

    def _connection(self) -> Any:
        return self._pg.connection()

    # -- the Upstream protocol -------------------------------------------------------------
    def start_ts(self) -> int:
        return 0  # the snapshot's time is the first watermark (set when it is loaded)

    def open(self, store: StateStore) -> None:
        if store.progress().bootstrapped:
            status = slot_status(self._connection(), self.slot)
            if status is None:
                raise StateError(
                    f"replication slot {self.slot} is gone but job {self.config.name!r} reads"
                    " from it: it was dropped outside deltamv; start the job with a new"
                    " checkpoint and new output paths"
                )
            if status.lost:
                raise StateError(
                    f"replication slot {self.slot} was invalidated by PostgreSQL (the WAL it"
                    " held was removed): start the job with a new checkpoint and new output paths"
                )
            self._check_columns(store)
        else:
            self._slot_is_ours()  # refuse another's slot before anything is created

    def _check_columns(self, store: StateStore) -> None:
        """Refuse a table the snapshot did not copy (added to the config later: its rows
        from before would be missing), a table dropped and created again since (another
        OID: the copied rows are gone), and one whose columns changed since the snapshot
        (the catalog is read afresh at every start; the slot's changes would no longer
        match it)."""
        recorded_any = any(
            store.source_position(_COLUMNS + name) is not None for name in self.pg_tables
        )
        for name, table in self.pg_tables.items():
            recorded = store.source_position(_COLUMNS + name)
            if recorded is None:
                if not recorded_any:
                    continue  # a state from before the columns were recorded
                raise StateError(
                    f"table {table.qualified} ([tables.{name}]) was not in the job's snapshot"
                    " (added to the config after the job's first run): its rows from before"
                    " would be missing; nothing more is committed (start the job with a new"
                    " checkpoint to copy it, or take it out of the config)"
                )
            oid = store.source_position(_OID + name)
            if oid is not None and int(oid) != table.oid:
                raise StateError(
                    f"table {table.qualified} is not the table the job's snapshot copied (it"
                    f" was dropped and created again: OID {table.oid}, copied {oid}); nothing"
                    " more is committed (start the job with a new checkpoint)"
                )
            was = tuple((n, t, m) for n, t, m in json.loads(recorded))
            now = _columns(table)
            if was != now:
                raise StateError(
                    f"columns of {table.qualified} changed since the job's snapshot:"
                    f" {column_diff(was, now)}; nothing more is committed (restart the job"
                    " from a new snapshot to take the new columns)"
                )

    def snapshot(self, store: StateStore) -> Iterator[tuple[str, pa.Table]]:
        """Create the slot with an exported snapshot and copy every table in it."""
        conn = self._connection()
        if self._slot_is_ours() and drop_slot(conn, self.slot):
            log.info("dropped replication slot %s left by a start that did not finish", self.slot)
        ensure_publication(conn, self.publication, list(self.pg_tables.values()))
        return self._copy(store)

    def _slot_is_ours(self) -> bool:
        """Whether the job's slot exists, created by this checkpoint's start (which did
        not finish: a first start calls this); False if there is none. A slot someone
        else made (another consumer, another checkpoint of a job with this name) holds
        their position: a one-line StateError, and it is left alone."""
        conn = self._connection()
        status = slot_status(conn, self.slot)
        if status is None:
            return False
        origin = self._origin()
        if origin is not None and created_as(conn, status, origin):
            return True
        raise StateError(
            f"replication slot {self.slot} exists but job {self.config.name!r} did not create"
            f" it from its checkpoint {self.checkpoint} (another consumer's slot, or another"
            " checkpoint's of a job with this name?): a first start needs a slot of its own;"
            f" drop it if nothing uses it (SELECT pg_drop_replication_slot('{self.slot}')) or"
            ' name another one (slot = "..." under [source]); the slot is left as it is'
        )

    def _origin(self) -> SlotOrigin | None:
        try:
            return SlotOrigin.from_json(json.loads((self.checkpoint / ORIGIN_FILE).read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return None  # not one this version wrote: no slot counts as created

    def _keep_origin(self, origin: SlotOrigin | None) -> None:
        """Write (or, None, remove) the checkpoint's slot origin durably: a temporary file,
        fsynced, renamed over the old one, and the rename fsynced with the folder."""
        path = self.checkpoint / ORIGIN_FILE
        if origin is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            tmp = path.with_name(f".{ORIGIN_FILE}.tmp")
            with open(tmp, "w") as f:
                json.dump(origin.to_json(), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        folder = os.open(self.checkpoint, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def _copy(self, store: StateStore) -> Iterator[tuple[str, pa.Table]]:
        for attempt in range(1, _SNAPSHOT_TRIES + 1):
            copied = False
            try:
                for item in self._copy_once(store):
                    copied = True
                    yield item
                return
            except TruncatedMeanwhile as exc:
                if copied or attempt == _SNAPSHOT_TRIES:
                    raise
                log.warning("%s (attempt %d): dropping slot %s, taking a new snapshot",
                            exc, attempt, self.slot)  # fmt: skip
                drop_slot(self._connection(), self.slot)
            except psycopg.OperationalError as exc:  # the server restarted, say
                raise StorageError(
                    f"the copy of the tables from PostgreSQL at {describe_dsn(self.dsn)}"
                    f" failed: {one_line(exc, self.dsn)[:300]} (the next start drops the"
                    " slot and copies again)"
                ) from None

    def _copy_once(self, store: StateStore) -> Iterator[tuple[str, pa.Table]]:
        with contextlib.ExitStack() as stack:
            # autocommit: the copy opens its own transaction. Connected first: a TRUNCATE
            # between the slot's snapshot and the copy's lock costs a new snapshot (and a
            # failed connect leaves no origin behind).
            copy = stack.enter_context(connect(self.dsn, timeout_s=self.timeout))
            # Kept before the slot exists: a start killed right after creating it must
            # still find it its own (and drop it) at the next start.
            origin = slot_origin(self._connection(), self.slot)
            self._keep_origin(origin)
            try:
                exported = stack.enter_context(create_slot(self.dsn, self.slot))
            except Exception:
                # Not created by this start (or not known to be: its next start refuses it).
                self._keep_origin(None)
                raise
            # The first versions' time: the server's clock once the slot is consistent. The
            # copy holds every transaction committed before the consistent point, and the
            # slot waited for those running when it was asked for, so a time taken before
            # it could precede commits the first versions include.
            snapshot_us = server_time_us(self._connection())
            faults.point("after-slot")
            created = replace(origin, consistent_lsn=exported.consistent_lsn)
            kept = False
            try:
                for name, batch in copy_tables(copy, exported.snapshot_name,
                                               list(self.pg_tables.values())):  # fmt: skip
                    if not kept:  # once the copy holds its locks (see above)
                        self._keep_origin(created)
                        kept = True
                    yield name, pa.Table.from_batches([batch])
                    faults.point("during-copy")
            finally:  # the copy failed, or copied nothing: the slot is still this one
                if not kept:
                    self._keep_origin(created)
            # Every transaction committed before the snapshot is in it: the first versions
            # stand at the time the slot was created (consistent).
            ts = commit_tso(snapshot_us, 0)
            store.set_source_position(_AFTER, str(exported.consistent_lsn))
            # The first versions' deltamv.pg_lsn: the consistent point (every transaction
            # whose commit record starts below it is in the copy, none above it).
            store.set_source_position(_COMMIT_LSN, str(exported.consistent_lsn))
            store.set_source_position(_TSO, str(ts))
            store.set_watermark(ts)
            for name, table in self.pg_tables.items():
                store.set_source_position(_COLUMNS + name, json.dumps(_columns(table)))
                store.set_source_position(_OID + name, str(table.oid))
            log.info(
                "copied %d tables at %s (snapshot %s)", len(self.pg_tables),
                format_lsn(exported.consistent_lsn), exported.snapshot_name,
            )  # fmt: skip

    stream_reads_state = True  # the slot's position after the snapshot

    def stream(self, spark: SparkSession, store: StateStore) -> DataFrame:
        from deltamv.postgres.source import register

        register(spark)
        start = int(store.source_position(_AFTER) or 0)
        return (
            spark.readStream.format(SOURCE_NAME)
            .option("dsn", self.dsn)
            .option("slot", self.slot)
            .option("publication", self.publication)
            .option("startLsn", str(start))
            .option("maxBytesPerTrigger", str(self.config.upstream.max_batch_bytes))
            .option("connectTimeout", str(self.timeout))
            .load()
        )

    def ingest(self, store: StateStore, compute: Compute, batch: int, lap: Lap) -> IngestResult:
        progress = store.progress()
        if batch <= progress.batch:
            raise ValueError(f"batch {batch} was already ingested (state is at {progress.batch})")
        started = int(time.time() * 1000)
        after = int(store.source_position(_AFTER) or 0)
        upto = max(self._logged_offset(batch), after)
        previous = int(store.source_position(_TSO) or 0)
        changes = self._read(after, upto, previous)
        if not changes.transactions:
            changes, upto = self._widen(after, upto, previous)
        lap("read")
        floor = progress.watermark
        watermark = floor
        tables: dict[str, pa.Table] = {}
        truncated = set()
        offsets: dict[str, Any] = {"lsn": upto, "planned": self._logged_offset(batch)}
        if changes.last_tso is not None and changes.transactions:
            watermark = max(changes.last_tso, floor)
            store.set_source_position(_TSO, str(changes.last_tso))
            if changes.last_commit_lsn is not None:
                store.set_source_position(_COMMIT_LSN, str(changes.last_commit_lsn))
                offsets["pg_lsn"] = format_lsn(changes.last_commit_lsn)
            if changes.last_commit_time_us is not None:
                store.set_source_position(_COMMIT_TIME, str(changes.last_commit_time_us))
            for name, change in changes.tables.items():
                rows = change.rows.rename_columns(
                    ["key" if c == "_key" else "op" if c == "_op" else c
                     for c in change.rows.column_names]
                )  # fmt: skip
                rows = rows.append_column(
                    "commit_ts", pa.array([watermark] * rows.num_rows, pa.int64())
                )
                tables[name] = rows
                if change.truncated:
                    truncated.add(name)
        store.set_source_position(_AFTER, str(upto))
        released = sum(t.num_rows for t in tables.values())
        store.begin_batch(
            batch, watermark=watermark, events=changes.changes, released=released,
            started_ms=started, blocker=None, offsets=offsets,
        )  # fmt: skip
        return IngestResult(batch, changes.changes, released, watermark, floor, None, tables,
                            frozenset(truncated))  # fmt: skip

    def _read(
        self, after: int, upto: int, previous: int, *, first_only: bool = False
    ) -> ChangeBatch:
        return self._pg.run(
            lambda conn: read_changes(
                conn, self.slot, self.publication, list(self.pg_tables.values()),
                after_lsn=after, upto_lsn=upto, previous_tso=previous, first_only=first_only,
            ),
            f"reading slot {self.slot}",
        )  # fmt: skip

    def _widen(self, after: int, upto: int, previous: int) -> tuple[ChangeBatch, int]:
        """A batch's window holding no commit (one transaction larger than
        ``max_batch_bytes`` spans it, or only WAL of other tables): the first transaction
        committed past it, read alone, in a window doubled until it holds that commit or
        reaches the WAL flushed now; and where the next batch starts. Stepping by the cap
        instead, every step decodes the large transaction from its start again."""
        cap = self.config.upstream.max_batch_bytes
        while True:
            flushed = self._pg.run(current_wal_lsn, "reading the WAL position")
            if flushed <= upto:
                return _NOTHING, upto
            upto = min(flushed, after + max(2 * (upto - after), cap))
            changes = self._read(after, upto, previous, first_only=True)
            if changes.last_end_lsn is not None:
                return changes, changes.last_end_lsn

    def planned_offsets(self, batch: int) -> Mapping[str, Any]:
        return {"planned": self._logged_offset(batch)}  # ("lsn" is where the batch read to)

    def _logged_offset(self, batch: int) -> int:
        return int(logged_offset(self.offset_log, batch)["lsn"])

    def locate(self, store: StateStore, key: str, commit_ts: int) -> tuple[str, int] | None:
        return None  # (no records: a change is a message of the slot)

    def commit_metadata(self, store: StateStore, batch: int) -> Mapping[str, str]:
        record = store.batch_record(batch) if batch >= 0 else None
        pg_lsn = (record.offsets or {}).get("pg_lsn") if record is not None else None
        if pg_lsn is None:
            last = store.source_position(_COMMIT_LSN)
            pg_lsn = format_lsn(int(last)) if last is not None else None
        return {PG_LSN_KEY: str(pg_lsn)} if pg_lsn else {}

    def prefetch(self, store: StateStore, *, once: bool) -> None:
        pass  # a batch's changes are known only once Spark's source plans it

    def after_batch(self, store: StateStore, batch: int) -> None:
        """A batch that read past Spark's window (:meth:`_widen`) confirms the slot there
        at once: the source starts its next window from the slot's confirmed position,
        instead of stepping through the read part by ``max_batch_bytes``."""
        offsets = store.batch_offsets(batch) or {}
        read_to, planned = offsets.get("lsn"), offsets.get("planned")
        if read_to is not None and planned is not None and int(read_to) > int(planned):
            self._confirm(int(read_to))

    def close(self) -> None:
        self._pg.close()

    def after_run(self, store: StateStore) -> None:
        """Confirm to PostgreSQL what is committed: Spark confirms a batch only when it
        plans the next one, so the last batch of a run would hold its WAL until the next."""
        progress = store.progress()
        if progress.applied_batch < progress.batch:
            return  # the last batch did not finish: it is replayed, keep its WAL
        position = store.source_position(_AFTER)
        if position is not None:
            self._confirm(int(position))
        self._pg.close()

    def _confirm(self, position: int) -> None:
        """Advance the slot to ``position``. A stop ends the streaming query without
        waiting for its source, which may still be confirming the last batch on a
        connection of its own: while the slot is in use, wait for it, a few seconds at
        most, then leave it to the next start (which confirms it as it plans a batch)."""
        deadline = time.monotonic() + _CONFIRM_WAIT_S
        while True:
            try:
                self._pg.run(
                    lambda conn: advance_slot(conn, self.slot, position),
                    f"confirming slot {self.slot}",
                )
                return
            except SlotInUseError:
                if time.monotonic() >= deadline:
                    log.warning(
                        "slot %s is busy; the next start confirms what this run committed",
                        self.slot,
                    )
                    return
                time.sleep(0.2)


def resolved_tables(config: JobConfig) -> Mapping[str, TableConfig]:
    """The tables of a PostgreSQL job with schemas and keys from the catalog."""
    return PostgresUpstream(config, Path(config.checkpoint) / "spark").config.tables


@dataclass(frozen=True)
class Retired:
    slot: str
    slot_dropped: bool
    publication: str
    publication_dropped: bool


def retire(config: JobConfig) -> Retired:
    """Drop a retired PostgreSQL job's replication slot and publication, so PostgreSQL
    stops keeping WAL for it. Refuses while the job runs (its checkpoint lock is held)."""
    import fcntl

    from deltamv.errors import CommitConflictError, ConfigError

    if config.upstream.kind != "postgres":
        raise ConfigError("source.kind", "only a PostgreSQL job has a slot and publication to drop",
                          source=config.origin)  # fmt: skip
    lock = Path(config.checkpoint) / "_lock"
    if lock.exists():
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CommitConflictError(
                    f"job {config.name!r} is running on checkpoint {config.checkpoint}: stop it"
                    " before dropping its slot"
                ) from None
            fcntl.flock(handle, fcntl.LOCK_UN)
    slot, publication = slot_name(config), publication_name(config)
    with connect(config.upstream.dsn or "", timeout_s=config.upstream.connect_timeout) as conn:
        dropped = drop_slot(conn, slot)
        existed = drop_publication(conn, publication)
    return Retired(slot, dropped, publication, existed)
