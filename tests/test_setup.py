"""The set-up's delta-spark jar fetch (scripts/fetch-delta-jars.sh): once, idempotent, and
one line and on when Maven is missing or cannot reach Maven Central."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fetch-delta-jars.sh"
ARTIFACT = (
    f"io.delta:delta-spark_{'.'.join(pyspark.__version__.split('.')[:2])}_2.13:"
    f"{importlib.metadata.version('delta-spark')}"
)


def fetch(dest: Path, mvn: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if mvn is not None:
        env["MVN"] = mvn
    return subprocess.run(
        ["bash", str(SCRIPT), str(dest), sys.executable],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_without_maven_it_says_so_in_one_line_and_goes_on(tmp_path: Path) -> None:
    out = fetch(tmp_path / "jars", mvn=str(tmp_path / "no-mvn"))
    assert out.returncode == 0
    assert out.stderr.count("\n") == 1 and "no Maven client" in out.stderr
    assert not (tmp_path / "jars").exists()


def test_without_maven_central_it_says_so_in_one_line_and_goes_on(tmp_path: Path) -> None:
    if shutil.which("mvn") is None:
        pytest.skip("no mvn on this machine")
    (tmp_path / "settings.xml").write_text(
        "<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>"
        "<url>http://127.0.0.1:9/maven2</url></mirror></mirrors></settings>"
    )
    mvn = tmp_path / "mvn"
    mvn.write_text(
        "#!/usr/bin/env bash\n"
        f'exec mvn -s {tmp_path}/settings.xml -Dmaven.repo.local={tmp_path}/repo "$@"\n'
    )
    mvn.chmod(0o755)
    out = fetch(tmp_path / "jars", mvn=str(mvn))
    assert out.returncode == 0
    assert out.stderr.count("\n") == 1 and "Maven could not fetch" in out.stderr
    assert ARTIFACT in out.stderr
    assert not (tmp_path / "jars").exists()


def test_a_fetch_happens_once(tmp_path: Path) -> None:
    if shutil.which("mvn") is None:
        pytest.skip("no mvn on this machine")
    dest = tmp_path / "jars"
    out = fetch(dest)
    if "could not fetch" in out.stderr:
        pytest.skip(f"Maven Central is out of reach here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert (dest / ".fetched").read_text().strip() == ARTIFACT
    names = sorted(p.name for p in dest.glob("*.jar"))
    assert any(n.startswith("delta-spark_") for n in names)
    assert any(n.startswith("delta-storage-") for n in names)
    spark_jars = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert not set(names) & spark_jars  # nothing pyspark already ships
    # Again: the stamp answers; Maven is not even asked.
    again = fetch(dest, mvn=str(tmp_path / "no-mvn"))
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
