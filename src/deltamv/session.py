"""The one place a SparkSession is built (jobs, CLI, tests, benchmarks)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from deltamv import class_archive, warm_runner
from deltamv.config import ANSI, TIME_ZONE, JobConfig, is_utc
from deltamv.delta import spark as delta_spark
from deltamv.errors import DeltaMVError
from deltamv.python_worker import worker_python

DEFAULT_MASTER = "local[2]"
_WAREHOUSE = "spark.sql.warehouse.dir"
log = logging.getLogger("deltamv.session")

_DEFAULT_CONF = {
    TIME_ZONE: "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    ANSI: "true",
    # A continuous job runs several Spark jobs per batch forever; Spark's status store
    # keeps up to 1000 jobs and 100,000 tasks by default. Nobody reads them (no UI), so
    # keep few: less JVM heap held in a long run.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.sql.streaming.numRecentProgressUpdates": "20",
}

# For a process that starts one streaming query (``deltamv run``): Spark's Python workers
# only look up, create and plan the job's source, once per start of the query (deltamv
# runs no Python on executors). Through Spark's daemon, each of the three kinds left a
# daemon process alive for the whole run (330 MB of resident memory together, measured),
# for a reuse that only a second start in the same session makes; started directly, each
# ends once used.
_ONE_QUERY_CONF = {"spark.python.use.daemon": "false"}


def build_spark(
    config: JobConfig | None = None,
    *,
    master: str | None = None,
    app_name: str | None = None,
    conf: Mapping[str, str] | None = None,
    one_query: bool = False,
) -> SparkSession:
    """Get or create the SparkSession for a job.

    The master comes from, in order: ``master``, ``DELTAMV_SPARK_MASTER``, the config's
    ``[spark] master``, an already-set ``spark.master`` (spark-submit), ``local[2]``.
    Settings from the config's ``[spark.conf]`` and ``conf`` are applied on top of
    deltamv's defaults. When the set-up fetched delta-spark's jars (or spark-submit got
    them), the session also gets Delta's SQL extension and catalog
    (:func:`delta_spark_available` tells; docs/delta-spark.md). ``one_query``: the process
    starts one streaming query (``deltamv run``): Python workers without Spark's daemon.
    """
    chosen = (
        master
        or os.environ.get("DELTAMV_SPARK_MASTER")
        or (config.spark.master if config else None)
    )
    if not chosen and not _submitted_by_spark_submit():
        chosen = DEFAULT_MASTER
    workers = _workers_python(chosen, os.environ.get("PYSPARK_PYTHON"))
    if workers is not None:
        os.environ["PYSPARK_PYTHON"] = workers
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(
        app_name or (f"deltamv-{config.name}" if config else "deltamv")
    )
    if chosen:
        builder = builder.master(chosen)
    settings = dict(_DEFAULT_CONF, **(_ONE_QUERY_CONF if one_query else {}))
    if config:
        # Spark makes its (unused) warehouse folder where the process runs, at the first
        # SQL it analyses: in the job's checkpoint instead.
        settings[_WAREHOUSE] = os.path.join(config.checkpoint, "spark-warehouse")
        settings.update(config.spark.conf)
    settings.update(conf or {})
    if not is_utc(settings.get(TIME_ZONE, "UTC")):
        # (a config's [spark.conf] is refused earlier, naming its key)
        raise DeltaMVError(
            f"{TIME_ZONE} = {settings[TIME_ZONE]!r}: deltamv evaluates every view in UTC"
        )
    if settings[ANSI].strip().lower() != "true":
        raise DeltaMVError(
            f"{ANSI} = {settings[ANSI]!r}: deltamv evaluates every view in Spark's ANSI mode"
        )
    settings[_JAVA_OPTIONS] = _driver_java_options(settings.get(_JAVA_OPTIONS, ""))
    settings.update(_delta_conf(settings))
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_ignoring_sigterm():
        try:
            spark = builder.getOrCreate()
        except PySparkRuntimeError as exc:
            if exc.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            raise DeltaMVError(
                f"Spark's driver did not start with master {chosen or '(submitted)'} (its"
                " own message is above): check [spark] master and conf, and the Java"
                " install"
            ) from None
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        _quiet_submitted_jvm()
    _quiet_accumulator_server(spark)
    log.info(
        "Spark %s, master %s, delta-spark %s",
        spark.version, spark.sparkContext.master, "on" if delta_spark.available(spark) else "off",
    )  # fmt: skip
    spark.sparkContext.setLogLevel(os.environ.get("DELTAMV_SPARK_LOG_LEVEL", "ERROR"))
    from deltamv.changelog.source import register

    register(spark)
    if one_query:  # its query's source runner forked by a warm process (deltamv.warm_runner)
        warm_runner.serve(spark, forks=1)
    return spark


def _quiet_accumulator_server(spark: SparkSession) -> None:
    """PySpark's accumulator server (a socket the JVM writes to) prints a traceback when
    the JVM goes away mid-message (killed, or crashed): the job's one line says the JVM
    is gone. Other errors there are printed as before."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    plain = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], EOFError):  # (called while handling it)
            plain(request, client_address)

    server.handle_error = handle_error


def _workers_python(master: str | None, given: str | None) -> str | None:
    """The interpreter Spark's Python workers run, or None to keep ``given`` (the user's
    ``PYSPARK_PYTHON``, naming another interpreter). They must run the interpreter the
    driver runs, with the same packages; with a local master, through a launcher that
    lets them import pyspark compiled (:mod:`deltamv.python_worker`)."""
    if given is not None and os.path.abspath(given) != sys.executable:
        return None
    local = master is not None and (master == "local" or master.startswith("local["))
    return (local and worker_python()) or sys.executable


def delta_spark_available(spark: SparkSession) -> bool:
    """True when ``spark`` reads Delta tables with delta-spark (``format("delta")``)."""
    return delta_spark.available(spark)


def _delta_conf(settings: Mapping[str, str]) -> dict[str, str]:
    """delta-spark's jars, extension and catalog for the session about to be built."""
    from pyspark import SparkConf, SparkContext

    running = _submitted_by_spark_submit() or SparkContext._gateway is not None
    jvm_conf = None
    if running:  # spark-submit's JVM, or an earlier session's: its settings count too
        SparkContext._ensure_initialized()
        active = SparkContext._active_spark_context
        jvm_conf = dict((active.getConf() if active else SparkConf()).getAll())
    return delta_spark.session_conf(settings, jvm_running=running, jvm_conf=jvm_conf)


_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def _quiet_submitted_jvm() -> None:
    """spark-submit started the driver's JVM with Spark's default logging (INFO, and
    every failed task's stack trace): give it deltamv's, as a driver JVM deltamv starts
    gets; a logging config of the user's own is kept. Once the session has started (the start sets Spark's
    logging up again), so Spark's own start-up lines are still printed."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    jvm = gateway.jvm
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    source = str(context.getConfiguration().getConfigurationSource().getLocation() or "")
    if not source.endswith("org/apache/spark/log4j2-defaults.properties"):
        return  # the user's own (SPARK_CONF_DIR, -Dlog4j2.configurationFile, ...)
    log_config = Path(__file__).with_name("log4j2.properties")
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(
        jvm.java.net.URI(f"file:{log_config}")
    )


def write_error_line(line: str) -> None:
    """``line`` on the driver's stderr. Under spark-submit, Spark merges the Python
    driver's stderr into its own stdout: the line goes to its JVM's stderr instead."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark import SparkContext

        try:
            SparkContext._ensure_initialized()  # (a config error comes before the session)
            err = SparkContext._gateway.jvm.System.err  # type: ignore[union-attr]
            err.println(line)
            err.flush()
            return
        except Exception:  # the JVM is gone: the merged stream it is
            pass
    print(line, file=sys.stderr)


def _driver_java_options(given: str) -> str:
    """The driver JVM's options: deltamv's logging config and the set-up's class archive
    (:mod:`deltamv.class_archive`), then the user's own options (a user's
    ``-Dlog4j2.configurationFile``, or options about class-data sharing, win)."""
    log_config = Path(__file__).with_name("log4j2.properties")
    logging_options = "" if "log4j2.configurationFile" in given else (
        f"-Dlog4j2.configurationFile=file:{log_config}"
    )  # fmt: skip
    return " ".join(o for o in (logging_options, class_archive.java_options(given), given) if o)


@contextlib.contextmanager
def _jvm_ignoring_sigterm() -> Iterator[None]:
    """A driver JVM launched here ignores SIGTERM, as PySpark has it ignore SIGINT.

    A SIGTERM to the job's whole process group (``kill -TERM -<pgid>``, a service
    manager's stop) then stops the job as one to the driver does: the driver stops the
    streaming query and exits, instead of the JVM running its shutdown hooks under the
    running query (py4j tracebacks, exit 1). The JVM still exits with the driver (it
    watches its stdin), and SIGKILL still kills it; its Python workers, which inherit
    the setting, end when it closes their sockets.
    """
    from pyspark import java_gateway

    launch = java_gateway.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:
        inner = kwargs.get("preexec_fn")  # PySpark's: ignore SIGINT

        def preexec() -> None:
            if inner is not None:
                inner()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec

        kwargs["preexec_fn"] = preexec
        return launch(*args, **kwargs)

    java_gateway.Popen = popen  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        java_gateway.Popen = launch  # type: ignore[misc]


def _submitted_by_spark_submit() -> bool:
    """True when spark-submit started this driver: its JVM already holds a master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get(
        "PYSPARK_SUBMIT_ARGS", ""
    )
