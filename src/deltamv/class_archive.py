"""A class-data archive of Spark's driver JVM: a job's Spark starts in about two thirds
of the time.

A fresh driver JVM loads and verifies some 20,000 classes before its first SQL runs
(Spark, Catalyst, Delta). Java's class-data sharing maps them from an archive instead.
``make setup`` builds the archive once (``python -m deltamv.class_archive``): a small
simulated bank job runs in a JVM started with ``-XX:ArchiveClassesAtExit``, which
writes every class it loaded when it exits; a second JVM then starts with the archive to
prove it. A driver JVM deltamv starts uses it (:func:`java_options`) when it is there.

The JVM itself checks that the archive fits: the same Java build, and the same jars at
the same paths, sizes and times. An archive that does not fit (Spark or Java upgraded
since) is passed over, silently, and the JVM starts as without it. A file cut short
would crash the JVM as it maps it, so the archive only takes its name once whole and
proven, and a start uses it only when its size is the one recorded then.

``DELTAMV_CLASS_ARCHIVE`` names another archive file, or ``0`` leaves none in use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ENV", "archive_path", "build", "java_options"]

ENV = "DELTAMV_CLASS_ARCHIVE"
_NAME = "spark-classes.jsa"
_SIZE = ".size"  # beside the archive: its size once built and proven
# The JVM's own lines about the archive (each class it leaves out when it writes one,
# an archive that does not fit when it reads one): the archive only saves time.
_QUIET = "-Xlog:cds=off,cds+dynamic=off"
# A driver JVM started with options of the user's own about class-data sharing keeps them.
_USERS_OWN = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def archive_path() -> Path | None:
    """Where the archive is (or goes): ``$DELTAMV_CLASS_ARCHIVE``, or the environment's
    own (``<sys.prefix>/spark-classes.jsa``, the venv's); None when switched off."""
    given = os.environ.get(ENV, "").strip()
    if given == "0":
        return None
    return Path(given) if given else Path(sys.prefix) / _NAME


def java_options(given: str) -> str:
    """The options that give a driver JVM the archive (none when there is no whole one,
    or ``given``, the user's options, has its own about class-data sharing)."""
    path = archive_path()
    if path is None or any(option in given for option in _USERS_OWN):
        return ""
    try:
        whole = int(path.with_name(path.name + _SIZE).read_text()) == path.stat().st_size
    except (OSError, ValueError):
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if whole else ""


def build(path: Path) -> None:
    """Build the archive at ``path`` (replacing one there once the new one is proven).
    Raises RuntimeError saying why when a step fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deltamv-classes-") as scratch:
        made = Path(scratch) / _NAME
        _run(["--train", str(made), scratch], "the run that writes it")
        if not made.is_file() or made.stat().st_size == 0:
            raise RuntimeError("the JVM wrote no archive")
        _run(["--prove", str(made)], "a start with it")
        size = made.stat().st_size
        part = path.with_name(f".{path.name}.{os.getpid()}")
        shutil.move(made, part)  # (a copy when the scratch is on another device)
        stamp = path.with_name(path.name + _SIZE)
        stamp.unlink(missing_ok=True)  # (no start takes the archive while it is replaced)
        os.replace(part, path)
        stamp.write_text(str(size))


def _run(args: list[str], what: str) -> None:
    env = dict(os.environ, **{ENV: "0"})  # the JVMs here take only the options given them
    done = subprocess.run(
        [sys.executable, "-m", "deltamv.class_archive", *args],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"{what} failed: {lines[-1] if lines else f'exit {done.returncode}'}")


def _train(archive: str, scratch: str) -> None:
    """A small bank job, run once, then its checks, in a JVM that writes the classes it
    loaded to ``archive`` when it exits (which this waits for)."""
    from deltamv.check.invariants import check_job
    from deltamv.config import load_config
    from deltamv.job import ViewJob
    from deltamv.session import build_spark
    from deltamv.sim import Truth, simulate

    out = Path(scratch) / "bank"
    simulate("bank", out, txns=200, snapshot_at=0.3)
    config_path = out / "config.toml"
    text = config_path.read_text()
    # a view Spark recomputes at every batch, besides the incremental ones
    ranked = (
        '[views.ranked]\nsql = "SELECT id, balance, RANK() OVER (ORDER BY balance DESC, id)'
        ' AS place FROM accounts"\npath = "out/views/ranked"\n\n'
    )
    config_path.write_text(text.replace("[invariants.", ranked + "[invariants.", 1))
    os.chdir(out)
    config = load_config(config_path)
    options = f"-XX:ArchiveClassesAtExit={archive} {_QUIET}"
    spark = build_spark(config, one_query=True, conf={"spark.driver.extraJavaOptions": options})
    ViewJob(config, spark).run(once=True)
    if not check_job(spark, config, truth=Truth.load(out / "truth"), views=None).ok:
        raise SystemExit("the training job's views do not match its truth")
    _exit_jvm(spark)


def _prove(archive: str) -> None:
    """A JVM started with ``archive`` runs a query (one that does not fit, or a file the
    JVM cannot map, fails here rather than in a job)."""
    from deltamv.session import build_spark

    # (-Xshare:on: a JVM that cannot use the archive does not start)
    options = f"-XX:SharedArchiveFile={archive} -Xshare:on"
    spark = build_spark(conf={"spark.driver.extraJavaOptions": options})
    rows = spark.sql("SELECT count(*) AS n FROM range(10)").collect()
    _exit_jvm(spark)
    if rows[0].n != 10:
        raise SystemExit(f"a query with the archive returned {rows}")


def _exit_jvm(spark: object) -> None:
    """Stop Spark and wait for its JVM to exit (it writes an archive as it exits)."""
    from pyspark import SparkContext

    spark.stop()  # type: ignore[attr-defined]
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        raise SystemExit("the driver JVM was not started here")
    proc.stdin.close()  # the JVM exits when its stdin closes
    proc.wait(timeout=600)


def main(argv: list[str]) -> int:
    if argv[:1] in (["--train"], ["--prove"]):  # (a step of build, in a process of its own)
        try:
            _train(argv[1], argv[2]) if argv[0] == "--train" else _prove(argv[1])
        except Exception as exc:  # its last line is the reason build gives
            print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
            return 1
        return 0
    path = Path(argv[0]) if argv else archive_path()
    if path is None:
        print(f"{ENV}=0: no class archive built")
        return 0
    try:
        build(path)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"deltamv: the Spark class archive was not built ({exc}); Spark starts without it")
        return 0
    print(f"Spark class archive: {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
