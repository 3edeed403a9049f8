"""PostgreSQL as a Spark streaming source: ``spark.readStream.format("deltamv-postgres")``.

Offsets are ``{"lsn": <int>}``: a position in the slot (see
:mod:`deltamv.postgres.changes`); the micro-batch ``(start, end]`` of Spark's offsets
holds the transactions whose commit record starts at or after ``start["lsn"]`` and
below ``end["lsn"]``, always whole.

- ``initialOffset``: the slot's confirmed position (``startLsn`` if given).
- ``latestOffset``: the WAL flushed now, at most ``maxBytesPerTrigger`` past the start
  (the start, or the slot's confirmed position where that is further: a deltamv job
  that read past a batch's end, to hold a transaction larger than the cap, confirms the
  slot there).
- ``commit(end)``: advances the slot to ``end``. Spark calls it only after the
  micro-batch completed (every sink write of it done), never for a batch that failed,
  so PostgreSQL keeps the WAL of any batch not yet committed everywhere.

Options: ``dsn`` (libpq connection string), ``slot``, ``publication`` (default: the
slot's name), ``startLsn`` (``X/Y`` or an int), ``maxBytesPerTrigger``,
``connectTimeout`` (seconds of retries, default 60).

Rows (for inspection; a deltamv job reads the batch's changes itself on the driver,
from the offsets): one per transaction, ``lsn`` (the commit LSN), ``commit_lsn``
(``X/Y``), ``end_lsn``, ``commit_time``, ``xid``, ``changes``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from deltamv.errors import ConfigError, DeltaMVError, wire
from deltamv.postgres.changes import batch_upper, transactions
from deltamv.postgres.connect import Reconnecting, connect, statement_failed
from deltamv.postgres.lsn import format_lsn, parse_lsn
from deltamv.postgres.slot import advance_slot, check_slot, current_wal_lsn, slot_status

_T = TypeVar("_T")

__all__ = ["SOURCE_NAME", "PostgresDataSource", "decode_offset", "encode_offset", "register"]

SOURCE_NAME = "deltamv-postgres"
SCHEMA = (
    "lsn BIGINT, commit_lsn STRING, end_lsn BIGINT, commit_time TIMESTAMP, xid BIGINT, "
    "changes BIGINT"
)
_ARROW_SCHEMA = pa.schema(
    [
        ("lsn", pa.int64()),
        ("commit_lsn", pa.string()),
        ("end_lsn", pa.int64()),
        ("commit_time", pa.timestamp("us", tz="UTC")),
        ("xid", pa.int64()),
        ("changes", pa.int64()),
    ]
)


def encode_offset(lsn: int) -> dict[str, int]:
    return {"lsn": lsn}


def decode_offset(offset: Mapping[str, Any] | None) -> int:
    if not offset or "lsn" not in offset:
        raise ConfigError("offset", f"not a {SOURCE_NAME} offset: {offset!r}")
    return int(offset["lsn"])


def _lsn_option(name: str, text: str) -> int:
    try:
        return int(text) if text.strip().isdigit() else parse_lsn(text)
    except ValueError:
        raise ConfigError(name, f"expected an LSN (X/Y or an integer), got {text!r}") from None


class _Options:
    def __init__(self, options: Mapping[str, str]) -> None:
        dsn = options.get("dsn")
        slot = options.get("slot")
        if not dsn:
            raise ConfigError("dsn", f"the {SOURCE_NAME} source needs a libpq connection string")
        if not slot:
            raise ConfigError("slot", f"the {SOURCE_NAME} source needs the replication slot")
        self.dsn: str = dsn
        self.slot: str = slot
        self.publication: str = options.get("publication") or slot
        start = options.get("startLsn")
        self.start: int | None = _lsn_option("startLsn", start) if start else None
        cap = options.get("maxBytesPerTrigger")
        self.max_bytes: int | None = None
        if cap is not None:
            try:
                self.max_bytes = int(cap)
            except ValueError:
                self.max_bytes = 0
            if self.max_bytes < 1:
                raise ConfigError("maxBytesPerTrigger", f"must be a positive integer, got {cap!r}")
        self.timeout = float(options.get("connectTimeout") or 60)


class PostgresPartition(InputPartition):
    """The transactions of one micro-batch (pickled to an executor)."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class PostgresStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. Holds one driver-side connection, reopened as needed."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = _Options(options)
        self._target: int | None = None
        self._pg: Reconnecting | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_pg"] = None  # a connection does not travel to executors
        return state

    def _run(self, work: Callable[[psycopg.Connection[Any]], _T], doing: str) -> _T:
        """``work`` over the driver-side connection, reopened once if it broke (the
        server restarted); a failure is a one-line StorageError."""
        if self._pg is None:
            self._pg = Reconnecting(self.options.dsn, timeout_s=self.options.timeout)
        try:
            return self._pg.run(work, doing)
        except DeltaMVError as e:  # only its text crosses Spark to the job
            raise wire(e) from None

    def initialOffset(self) -> dict:
        if self.options.start is not None:
            return encode_offset(self.options.start)
        status = self._run(lambda c: check_slot(c, self.options.slot), "reading the slot")
        return encode_offset(status.confirmed_flush_lsn or 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._run(current_wal_lsn, "reading the WAL position")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        slot, target = self.options.slot, self._target

        def positions(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            latest = current_wal_lsn(conn) if target is None else target
            status = slot_status(conn, slot)  # (a missing slot fails the batch's read)
            return latest, (status.confirmed_flush_lsn or 0) if status is not None else 0

        latest, confirmed = self._run(positions, "reading the WAL position")
        # A job that read past the last batch's end (a transaction larger than the cap)
        # confirmed the slot there: the next batch starts from it, not from ``start``.
        begin = max(decode_offset(start), min(confirmed, latest))
        cap = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return encode_offset(batch_upper(begin, latest, cap))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = decode_offset(start), decode_offset(end)
        return [PostgresPartition(begin, finish)] if finish > begin else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PostgresPartition):
            return iter(())  # Spark reads one empty partition when partitions() is empty
        return self._read(partition)

    def _read(self, partition: PostgresPartition) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._transactions(partition)
        except DeltaMVError as e:
            raise wire(e) from None
        except psycopg.Error as e:
            raise wire(statement_failed(self.options.dsn, e, "reading the slot")) from None

    def _transactions(self, partition: PostgresPartition) -> Iterator[pa.RecordBatch]:
        o = self.options
        with connect(o.dsn, timeout_s=o.timeout) as conn:
            rows: list[tuple[int, str, int, dt.datetime, int, int]] = []
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            for t in transactions(conn, o.slot, o.publication, partition.start, partition.end):
                when = epoch + dt.timedelta(microseconds=t.commit_time_us)
                rows.append(
                    (t.commit_lsn, format_lsn(t.commit_lsn), t.end_lsn, when, t.xid, t.changes)
                )
                if len(rows) >= 8192:
                    yield _batch(rows)
                    rows = []
            if rows:
                yield _batch(rows)

    def commit(self, end: dict) -> None:
        slot = self.options.slot
        self._run(lambda c: advance_slot(c, slot, decode_offset(end)), f"confirming slot {slot}")

    def stop(self) -> None:
        if self._pg is not None:
            self._pg.close()


def _batch(rows: list[tuple[int, str, int, dt.datetime, int, int]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, _ARROW_SCHEMA, strict=True)],
        schema=_ARROW_SCHEMA,
    )


class PostgresDataSource(DataSource):
    """The ``deltamv-postgres`` streaming data source."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return PostgresStreamReader(self.options)


def register(spark: Any) -> None:
    """Register the ``deltamv-postgres`` data source with ``spark`` (idempotent)."""
    spark.dataSource.register(PostgresDataSource)
