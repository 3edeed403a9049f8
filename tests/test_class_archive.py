"""The class archive of Spark's driver JVM (``deltamv.class_archive``): used only whole,
never over the user's own options, and by the JVMs deltamv starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deltamv import class_archive
from deltamv.class_archive import ENV, java_options
from deltamv.session import _driver_java_options


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spark-classes.jsa"
    path.write_bytes(b"\0" * 4096)
    path.with_name(path.name + ".size").write_text("4096")
    monkeypatch.setenv(ENV, str(path))
    return path


def test_a_whole_archive_is_given_to_the_driver_jvm_with_its_lines_quiet(archive: Path) -> None:
    options = java_options("")
    assert options.split() == [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off,cds+dynamic=off"]
    # after deltamv's logging config, before the user's own options
    given = _driver_java_options("-Xss4m").split()
    assert given[0].startswith("-Dlog4j2.configurationFile=file:")
    assert given[1:] == [*options.split(), "-Xss4m"]


def test_an_archive_cut_short_or_not_proven_is_not_used(archive: Path) -> None:
    # the JVM would crash mapping a file shorter than its header says
    archive.write_bytes(b"\0" * 1000)
    assert java_options("") == ""
    archive.with_name(archive.name + ".size").unlink()  # built, but never proven
    archive.write_bytes(b"\0" * 4096)
    assert java_options("") == ""


def test_no_archive_or_switched_off_gives_no_option(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.unlink()
    assert java_options("") == ""
    assert "SharedArchiveFile" not in _driver_java_options("")
    monkeypatch.setenv(ENV, "0")
    assert class_archive.archive_path() is None
    assert java_options("") == ""


@pytest.mark.parametrize(
    "users", ["-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=x"]
)
def test_the_users_own_class_sharing_options_win(archive: Path, users: str) -> None:
    assert java_options(users) == ""
    assert _driver_java_options(users).endswith(users)


def test_the_sessions_jvm_maps_the_venvs_archive_when_set_up_built_one(spark: Any) -> None:
    """``make setup`` builds the archive (its one line says so when it could not): a
    session's driver JVM then starts with it and maps it; without one, with no option."""
    path = class_archive.archive_path()
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    if path is None or not java_options(""):
        assert "SharedArchiveFile" not in options
        return
    assert f"-XX:SharedArchiveFile={path}" in options
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert bean.getVMOption("SharedArchiveFile").getValue() == str(path)
    assert bean.getVMOption("UseSharedSpaces").getValue() == "true"


def test_a_build_that_fails_says_why_in_one_line_and_leaves_no_archive(tmp_path: Path) -> None:
    """The set-up goes on without the archive (Spark then starts as before)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["JAVA_HOME"] = str(tmp_path / "no-java")  # the JVM cannot start
    target = tmp_path / "archive" / "spark-classes.jsa"
    done = subprocess.run(
        [sys.executable, "-m", "deltamv.class_archive", str(target)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, done.stdout
    assert done.stdout.startswith("deltamv: the Spark class archive was not built (the run"
                                  " that writes it failed: DeltaMVError: Spark's driver did not"
                                  " start"), done.stdout  # fmt: skip
    assert done.stdout.rstrip().endswith("Spark starts without it"), done.stdout
    assert list(target.parent.iterdir()) == []
