"""The driver's engine (``deltamv.compute``)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_drivers_engine_works_in_utc_on_a_machine_in_another_zone() -> None:
    """The incremental maintenance (DuckDB) takes a timestamp's date and hour in UTC, as
    the Spark session does, whatever the machine's time zone."""
    script = (
        "import datetime as dt, pyarrow as pa\n"
        "from deltamv.compute import Compute\n"
        "ts = pa.array([dt.datetime(2024, 1, 1, 2, tzinfo=dt.UTC)], pa.timestamp('us', 'UTC'))\n"
        "out = Compute().query('SELECT CAST(ts AS DATE) AS d, hour(ts) AS h FROM t',"
        " t=pa.table({'ts': ts}))\n"
        "print(out.to_pylist())\n"
    )
    env = {**os.environ, "TZ": "America/New_York"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[{'d': datetime.date(2024, 1, 1), 'h': 2}]", done.stdout
