"""jobs/run_view.py under spark-submit: the submitted master is kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deltamv import delta
from deltamv.config import load_config
from deltamv.sim import simulate


@pytest.mark.slow
def test_spark_submit_runs_the_job_with_the_submitted_master(tmp_path: Path) -> None:
    run = simulate("bank", tmp_path / "bank", seed=8, txns=100)
    root = Path(__file__).resolve().parents[2]
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit, "spark-submit comes with the pyspark package"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    out = subprocess.run(
        [submit, "--master", "local[1]", str(root / "jobs" / "run_view.py"), str(run.config_path), "--once"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    errors = "\n".join(line for line in out.stderr.splitlines() if " INFO " not in line)
    assert out.returncode == 0, errors[-3000:]
    # spark-submit merges the Python driver's stderr into its stdout.
    assert "master local[1]" in out.stdout, out.stdout[-3000:]
    config = load_config(run.config_path)
    latest = delta.versions(config.views["total_balance"].path)[-1]
    assert latest.watermark == run.final_watermark


@pytest.mark.slow
def test_under_spark_submit_the_error_line_is_on_stderr(tmp_path: Path) -> None:
    """spark-submit merges the Python driver's stderr into its stdout: deltamv's one
    line went to stdout, and stderr held only Spark's logging."""
    run = simulate("bank", tmp_path / "bank", seed=8, txns=20)
    text = run.config_path.read_text().replace("SUM(balance)", "SUM(balanse)", 1)
    run.config_path.write_text(text)
    root = Path(__file__).resolve().parents[2]
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    out = subprocess.run(
        [submit, "--master", "local[1]", str(root / "jobs" / "run_view.py"), str(run.config_path), "--once"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith("deltamv: error: "), out.stderr[-2000:]
    assert "balanse" in out.stderr.strip().splitlines()[-1]
    assert "deltamv: error" not in out.stdout
    assert "Traceback" not in out.stderr
