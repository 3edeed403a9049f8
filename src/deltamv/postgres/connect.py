"""Connections to the upstream PostgreSQL, with retry and a DSN that is safe to print."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from deltamv.errors import ConfigError, StorageError

__all__ = [
    "SESSION_SETTINGS",
    "Reconnecting",
    "connect",
    "describe_dsn",
    "one_line",
    "statement_failed",
]

_T = TypeVar("_T")

log = logging.getLogger("deltamv.postgres")

SESSION_SETTINGS: dict[str, str] = {
    # Values are read as PostgreSQL's text output (pgoutput's tuples, COPY): pin every
    # setting that changes that text, so a snapshot row and a change render alike.
    "TimeZone": "UTC",
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",  # shortest text that reads back to the same float
    "bytea_output": "hex",
}

# SQLSTATEs that retrying cannot fix: bad password, no such role or database, refused
# by pg_hba.conf, no permission to connect.
_PERMANENT = {"28000", "28P01", "3D000", "42501"}
_PERMANENT_TEXT = (
    "authentication failed",
    "must be superuser or replication role",
    "no pg_hba.conf entry",
    "does not exist",
    "permission denied",
)
_SHOWN_KEYS = ("host", "hostaddr", "port", "dbname", "user")

# TCP keepalives (unless the DSN sets its own): a server gone without closing the
# connection (a network cut, a host down) breaks it within about a minute, and the job
# opens it again or says so, where the system's default waits two hours.
_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "30", "keepalives_interval": "10",
               "keepalives_count": "3"}  # fmt: skip


def describe_dsn(dsn: str) -> str:
    """``host=... port=... dbname=... user=...`` of a DSN: never its password or other
    options. An unparsable DSN is described without echoing it."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    shown = [f"{k}={parts[k]}" for k in _SHOWN_KEYS if parts.get(k)]
    return " ".join(shown) or "host=<libpq default>"


def one_line(exc: BaseException, dsn: str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    password = _password(dsn)
    if password:
        text = text.replace(password, "***")
    return text


def _password(dsn: str) -> str | None:
    try:
        value = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(value) if value else None


def _permanent(exc: psycopg.Error) -> bool:
    if getattr(exc, "sqlstate", None) in _PERMANENT:
        return True
    text = str(exc).lower()
    return any(t in text for t in _PERMANENT_TEXT)


def connect(
    dsn: str,
    *,
    timeout_s: float = 60.0,
    replication: bool = False,
    autocommit: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> psycopg.Connection[Any]:
    """Open a connection to PostgreSQL at ``dsn`` (a libpq connection string).

    Retries with exponential backoff (0.5 s doubling up to 8 s) for at most
    ``timeout_s`` seconds in total, logging one line per retry on the
    ``deltamv.postgres`` logger. Errors that retrying cannot fix (bad password, no such
    database or role) give up at once. Giving up raises a one-line
    :class:`StorageError` ``cannot reach PostgreSQL at host=... port=...: <reason>``;
    neither it nor the log ever shows the password.

    A regular connection gets :data:`SESSION_SETTINGS` (UTC, ISO dates, exact floats,
    hex bytea), which the snapshot copy and the change decoding rely on. With
    ``replication=True`` the connection is a ``replication=database`` one (for
    ``CREATE_REPLICATION_SLOT``), always in autocommit.
    """
    where = describe_dsn(dsn)
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise ConfigError(
            "source.dsn", f"not a libpq connection string: {one_line(e, dsn)}"
        ) from None
    extra: dict[str, Any] = {key: v for key, v in _KEEPALIVES.items() if key not in given}
    if "application_name" not in given:
        extra["application_name"] = "deltamv"
    if replication:
        extra["replication"] = "database"
    began = time.monotonic()
    slept = 0.0  # counted apart from the clock, so an injected ``sleep`` keeps the bound

    def left() -> float:
        return timeout_s - max(time.monotonic() - began, slept)

    delay = 0.5
    attempt = 1
    while True:
        remaining = left()
        if "connect_timeout" not in given:
            extra["connect_timeout"] = max(2, min(10, int(remaining) + 1))
        try:
            conn = psycopg.connect(dsn, autocommit=autocommit or replication, **extra)
        except psycopg.OperationalError as e:
            reason = one_line(e, dsn)
            remaining = left()
            if _permanent(e) or remaining <= 0:
                raise StorageError(f"cannot reach PostgreSQL at {where}: {reason}") from None
            wait = min(delay, remaining)
            log.warning(
                "PostgreSQL at %s unreachable (attempt %d): %s; retrying in %.1f s",
                where, attempt, reason, wait,
            )  # fmt: skip
            sleep(wait)
            slept += wait
            delay = min(delay * 2, 8.0)
            attempt += 1
            continue
        if not replication:
            with conn.cursor() as cur:
                for name, value in SESSION_SETTINGS.items():
                    cur.execute("SELECT set_config(%s, %s, false)", [name, value])
            if not autocommit:
                conn.commit()
        if attempt > 1:
            log.info("PostgreSQL at %s reached after %d attempts", where, attempt)
        return conn


def statement_failed(dsn: str, exc: psycopg.Error, doing: str) -> StorageError:
    """A statement PostgreSQL refused on a sound connection, as one line."""
    return StorageError(
        f"PostgreSQL at {describe_dsn(dsn)} failed while {doing}: {one_line(exc, dsn)}"
    )


class Reconnecting:
    """One connection to ``dsn``, opened when first needed and opened again when it broke
    (the server restarted, the backend was terminated, a network blip). :meth:`run` calls
    ``work`` with it, and once more over a new connection when that failed on a broken
    one; what still fails is a one-line StorageError (a deltamv error, also when it
    crosses Spark from a data source's worker)."""

    def __init__(self, dsn: str, *, timeout_s: float = 60.0) -> None:
        self.dsn = dsn
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.dsn, timeout_s=self.timeout_s)
        return self._conn

    def run(self, work: Callable[[psycopg.Connection[Any]], _T], doing: str) -> _T:
        """``work(connection)``; ``doing`` says what for, in the error."""
        try:
            return work(self.connection())
        except psycopg.Error as exc:
            if not (isinstance(exc, psycopg.OperationalError) and self._broken()):
                raise self._failed(exc, doing) from None  # the statement failed
            log.warning(
                "connection to PostgreSQL lost while %s (%s); reconnecting",
                doing, one_line(exc, self.dsn)[:200],
            )  # fmt: skip
            self.close()
        try:
            return work(self.connection())
        except psycopg.Error as exc:
            if not (isinstance(exc, psycopg.OperationalError) and self._broken()):
                raise self._failed(exc, doing) from None
            raise StorageError(
                f"lost the connection to PostgreSQL at {describe_dsn(self.dsn)} while {doing}:"
                f" {one_line(exc, self.dsn)}"
            ) from None

    def _broken(self) -> bool:
        return self._conn is None or self._conn.closed or bool(self._conn.broken)

    def _failed(self, exc: psycopg.Error, doing: str) -> StorageError:
        return statement_failed(self.dsn, exc, doing)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
