from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from deltamv.delta import commit, read_arrow, spark_to_arrow, versions, write_dataframe

    path = sys.argv[1]
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("deltamv-delta-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        sc = spark.sparkContext
        # Wait for both executor JVMs (driver + 2 in the block manager list).
        import time
        deadline = time.time() + 120
        while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:
            assert time.time() < deadline, "executors did not register"
            time.sleep(0.5)
        df = spark.sql(
            "SELECT id, CAST(id AS STRING) AS s, CAST(id / 100 AS DECIMAL(18, 2)) AS amount,"
            " TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS at"
            " FROM range(0, 100000, 1, 8)"
        )
        schema = spark_to_arrow(df.schema)
        for batch in (1, 2):
            files = write_dataframe(df, path, schema=schema, prefix=f"b{batch}",
                                    target_rows_per_file=20000)
            assert len(files) >= 8, files
            result = commit(path, schema=schema, add=files, replace=True, app_id="lc",
                            batch_id=batch, metadata={"deltamv.job": "lc",
                            "deltamv.watermark": str(batch)},
                            expected_version=None if batch == 1 else 0)
            assert result.version == batch - 1, result
        table = read_arrow(path)
        assert table.num_rows == 100000, table.num_rows
        assert sorted(table.column("id").to_pylist()) == list(range(100000))
        assert [v.watermark for v in versions(path)] == [1, 2]
        print("OK", sc.applicationId)
    finally:
        spark.stop()
    """
)


@pytest.mark.slow
def test_write_dataframe_with_executors_in_separate_jvms(tmp_path) -> None:
    env = dict(
        os.environ,
        SPARK_WORKER_DIR=str(tmp_path / "spark-work"),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "table")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    _remove_worker_dir(out.stdout)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip().startswith("OK"), out.stdout


def _remove_worker_dir(stdout: str) -> None:
    """Remove the executors' work folder this run left inside the pyspark package.

    local-cluster workers ignore SPARK_WORKER_DIR and write to $SPARK_HOME/work/<app id>.
    """
    import pyspark

    for line in stdout.splitlines():
        if line.startswith("OK app-"):
            home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
            work = os.path.join(home, "work")
            shutil.rmtree(os.path.join(work, line.split()[1]), ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(work)
