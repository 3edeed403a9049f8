from __future__ import annotations

import logging
import tempfile

import pytest
from psycopg.conninfo import conninfo_to_dict

from deltamv import tso
from deltamv.errors import StorageError
from deltamv.postgres import commit_tso, connect, describe_dsn, format_lsn, parse_lsn


def test_unreachable_server_gives_up_with_one_line_and_no_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tempfile.mkdtemp(prefix="deltamv-nopg-")
    dsn = f"host={folder} port=5999 dbname=bank user=deltamv password=s3cret-pw"
    waits: list[float] = []
    with (
        caplog.at_level(logging.WARNING, logger="deltamv.postgres"),
        pytest.raises(StorageError) as err,
    ):
        connect(dsn, timeout_s=4.0, sleep=waits.append)
    text = str(err.value)
    assert text.startswith(
        f"cannot reach PostgreSQL at host={folder} port=5999 dbname=bank user=deltamv: "
    )
    assert "\n" not in text and "s3cret" not in text
    assert waits == [0.5, 1.0, 2.0, 0.5]  # exponential backoff, 4 s in all
    retries = [r for r in caplog.records if r.name == "deltamv.postgres"]
    assert len(retries) == len(waits) >= 1
    assert all("s3cret" not in r.getMessage() for r in retries)
    assert "retrying in 0.5 s" in retries[0].getMessage()


def test_bounded_total_time() -> None:
    folder = tempfile.mkdtemp(prefix="deltamv-nopg-")
    import time

    began = time.monotonic()
    with pytest.raises(StorageError):
        connect(f"host={folder} port=5999 dbname=x", timeout_s=1.2)
    assert time.monotonic() - began < 5


def test_wrong_database_fails_at_once(pg_server) -> None:  # type: ignore[no-untyped-def]
    waits: list[float] = []
    with pytest.raises(StorageError, match="does not exist"):
        connect(pg_server.dsn("no_such_db"), timeout_s=30, sleep=waits.append)
    assert waits == []


def test_describe_dsn_hides_secrets() -> None:
    dsn = "host=db.example port=5432 dbname=bank user=me password=pw sslkey=/k options='-c x=y'"
    assert describe_dsn(dsn) == "host=db.example port=5432 dbname=bank user=me"
    assert (
        describe_dsn("postgresql://me:pw@db:5433/bank") == "host=db port=5433 dbname=bank user=me"
    )
    assert "pw" not in describe_dsn("not a dsn password=pw")


def test_lsn_text() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
    assert format_lsn(0) == "0/0"
    for bad in ("16B374D848", "x/1", "", "1/123456789"):
        with pytest.raises(ValueError, match="not a PostgreSQL LSN"):
            parse_lsn(bad)


def test_commit_tso_strictly_increases_and_follows_the_clock() -> None:
    t0 = 1_700_000_000_000_000  # µs
    a = commit_tso(t0, 0)
    assert a == tso.compose(t0 // 1000, 0)
    b = commit_tso(t0 + 400, a)  # same millisecond
    assert b == a + 1
    c = commit_tso(t0 - 5_000_000, b)  # the clock stepped back
    assert c == b + 1
    d = commit_tso(t0 + 10_000, c)
    assert tso.physical_ms(d) == t0 // 1000 + 10 and tso.logical(d) == 0
    full = tso.compose(5, tso.LOGICAL_MASK)
    assert commit_tso(0, full) == tso.compose(6, 0)  # logical overflow carries


def test_connections_keep_alive_unless_the_dsn_says_otherwise(pg_server) -> None:  # type: ignore[no-untyped-def]
    """TCP keepalives: a server gone without closing the connection breaks it in about a
    minute, not the system's two hours."""
    with connect(pg_server.dsn()) as conn:
        options = conninfo_to_dict(conn.info.dsn)
    assert (options["keepalives_idle"], options["keepalives_count"]) == ("30", "3")
    with connect(pg_server.dsn() + " keepalives_idle=300") as conn:
        assert conninfo_to_dict(conn.info.dsn)["keepalives_idle"] == "300"


def test_the_job_retries_as_long_as_its_config_says(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``source.connect_timeout`` bounds the job's retries (60 s by default: a server's
    crash recovery can take longer, an outside check); a bare number has no unit."""
    import time

    from deltamv.config import load_config
    from deltamv.errors import ConfigError
    from deltamv.job.postgres import PostgresUpstream

    folder = tempfile.mkdtemp(prefix="deltamv-nopg-")
    config = tmp_path / "job.toml"
    text = (
        f'[job]\nname = "j"\ncheckpoint = "{tmp_path}/ck"\n\n[source]\nkind = "postgres"\n'
        f'dsn = "host={folder} port=5999 dbname=x"\nconnect_timeout = TIMEOUT\n\n[tables.t]\n\n'
        f'[views.v]\nsql = "SELECT * FROM t"\npath = "{tmp_path}/v"\n'
    )
    config.write_text(text.replace("TIMEOUT", "5"))
    with pytest.raises(ConfigError, match=r"source\.connect_timeout: 5 has no unit"):
        load_config(config)
    config.write_text(text.replace("TIMEOUT", '"1.5 seconds"'))
    loaded = load_config(config)
    assert loaded.upstream.connect_timeout == 1.5
    began = time.monotonic()
    with pytest.raises(StorageError, match="cannot reach PostgreSQL"):
        PostgresUpstream(loaded, tmp_path / "spark")
    assert time.monotonic() - began < 10
