"""The oracle test with executors in separate JVMs and Python workers (local-cluster)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from deltamv.session import build_spark
    from tests.job.simrun import SimJob

    spark = build_spark(master="local-cluster[2,1,1024]", app_name="deltamv-oracle-local-cluster")
    try:
        sc = spark.sparkContext
        deadline = time.time() + 120
        while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # driver + 2 executors
            assert time.time() < deadline, "executors did not register"
            time.sleep(0.5)
        job = SimJob.create(
            Path(sys.argv[1]), "bank", seed=11, txns=300, splits=2,
            watermark_mode="min-commit-ts", snapshot_at=0.4, segment_events=100,
            segments_per_batch=10, straggler_rate=0.3, duplicate_rate=0.05,
        )
        while job.pending:
            job.publish(6)
            job.run_once(spark)
            job.assert_latest_is_global_watermark()
        checked = job.assert_every_version_matches_truth(spark)
        assert checked >= 8, checked
        print("OK", sc.applicationId, checked)
    finally:
        spark.stop()
    """
)


def test_oracle_with_executors_in_separate_processes(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(root),
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )  # fmt: skip
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
