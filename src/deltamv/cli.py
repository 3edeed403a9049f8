"""The ``deltamv`` command line. Parses arguments, calls the library.

The config every command takes is docs/config.md; what ``run`` promises is
docs/guarantees.md; ``check``, ``status`` and ``read`` are docs/check-status-read.md.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from deltamv.check.commands import register_commands
from deltamv.errors import DeltaMVError
from deltamv.logs import to_stderr


def quiet_query_context_logs(verbose: bool) -> None:
    """PySpark logs a Spark error with a SQL context (a view or an invariant failing on
    the data) as a JSON record with the JVM's trace before raising it; unless
    ``verbose``, it reaches the user as deltamv's one line alone."""
    if verbose:
        return
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _run(args: argparse.Namespace) -> int:
    from deltamv.config import load_config
    from deltamv.job import ViewJob
    from deltamv.job.run import refuse_if_running
    from deltamv.session import build_spark

    quiet_query_context_logs(args.verbose)
    config = load_config(args.config)
    refuse_if_running(Path(config.checkpoint), config.name)  # before Spark's seconds of start
    job: ViewJob | None = None
    signals = 0
    jvm: list[int] = []  # the driver's JVM, where this process started it

    def stop(signum: int, frame: object) -> None:
        # Ctrl-C or SIGTERM: the streaming query stops, run() returns; a batch cut
        # short is replayed on the next start, never half-committed. A second one ends
        # the process at once: nothing is lost either (the kill tests' case).
        nonlocal signals
        signals += 1
        if signals > 1:
            try:
                # The JVM ends first, at once: left to end with the driver, it stops
                # Spark while the streaming query's thread is still ending, which may
                # print that thread's trace (RpcEnv already stopped).
                for pid in jvm:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                os.write(2, b"deltamv: stopped at once (a second signal); the next run"
                            b" replays the batch in progress\n")  # fmt: skip
            finally:
                os._exit(128 + signum)
        if job is not None:
            job.request_stop()

    # Spark starts on a thread of its own: PySpark sets its own Ctrl-C handler only when
    # started from the main thread (a handler that calls into the JVM in the middle of a
    # call), and the main thread stays free to take signals: a first one stops the job
    # once Spark has started (a start cut short leaves a JVM that prints a stack trace),
    # a second one ends a start that hangs.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started: list[ViewJob] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            started.append(ViewJob(config, build_spark(config, one_query=True)))
        except BaseException as exc:
            failed.append(exc)

    starting = threading.Thread(target=start, name="deltamv-start", daemon=True)
    starting.start()
    while starting.is_alive():
        starting.join(0.2)  # (in short waits: signal handlers run meanwhile)
    if failed:
        raise failed[0]
    job = started[0]
    from pyspark import SparkContext

    launched = getattr(SparkContext._gateway, "proc", None)  # (None under spark-submit)
    if launched is not None:
        jvm.append(launched.pid)
    if signals:
        logging.getLogger("deltamv").info("stopped on request before the job started")
        return 0
    job.run(once=args.once)
    return 0


def _retire(args: argparse.Namespace) -> int:
    from deltamv.config import load_config
    from deltamv.job.postgres import retire

    done = retire(load_config(args.config))
    slot = "dropped" if done.slot_dropped else "was already gone"
    publication = "dropped" if done.publication_dropped else "was already gone"
    print(f"replication slot {done.slot} {slot}; publication {done.publication} {publication}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from deltamv.sim import simulate

    result = simulate(
        args.workload,
        args.out,
        seed=args.seed,
        txns=args.txns,
        duration=args.duration,
        regions=args.regions,
        splits=args.splits,
        watermark_mode=args.watermark_mode,
        snapshot_at=args.snapshot_at,
        live=args.live,
    )
    print(
        f"{args.workload}: {result.transactions} transactions, {result.events} events, "
        f"final watermark {result.final_watermark} -> {result.out}"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltamv",
        description="Strongly consistent materialized views of a TiKV-style change log in Delta Lake.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log Spark's warnings and the whole text of a failed query's error too",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a view job (the config: docs/config.md)")
    run.add_argument("config", help="the job's TOML config")
    run.add_argument(
        "--once", action="store_true", help="process what the log holds now, then exit"
    )
    run.set_defaults(func=_run)

    retire = sub.add_parser(
        "retire",
        help="drop a retired PostgreSQL job's replication slot and publication (PostgreSQL"
        " then frees the WAL the slot held)",
    )
    retire.add_argument("config", help="the job's TOML config")
    retire.set_defaults(func=_retire)

    sim = sub.add_parser("simulate", help="write a simulated change log, config and ground truth")
    sim.add_argument("workload", help="bank, orders or authors")
    sim.add_argument("--out", required=True, help="output folder")
    sim.add_argument("--seed", type=int, default=0)
    size = sim.add_mutually_exclusive_group()
    size.add_argument("--txns", type=int, help="number of transactions")
    size.add_argument("--duration", type=float, help="seconds of (simulated or live) time")
    sim.add_argument("--regions", type=int, default=4)
    sim.add_argument("--splits", type=int, default=0, help="region splits and merges")
    sim.add_argument("--watermark-mode", choices=["start-ts", "min-commit-ts"], default="start-ts")
    sim.add_argument(
        "--snapshot-at",
        type=float,
        metavar="FRACTION",
        help="write a snapshot at this fraction of the run",
    )
    sim.add_argument("--live", action="store_true", help="write in real time until stopped")
    sim.set_defaults(func=_simulate)

    register_commands(sub)  # check, status, read: beside their library code
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # deltamv's own lines (one per batch) at INFO; everything else (py4j, Spark's
    # Python side) only from WARNING up, unless --verbose.
    to_stderr(logging.DEBUG if args.verbose else logging.INFO)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, force=True)
    if not args.verbose:
        # A failed batch reaches the user as deltamv's one line below; py4j would first
        # log the whole traceback of the Spark callback that raised it.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        for handler in logging.getLogger().handlers:
            handler.addFilter(_QuietPy4J())
    try:
        return int(args.func(args))
    except DeltaMVError as exc:
        from deltamv.session import write_error_line

        write_error_line(f"deltamv: error: {exc}")
        return 1
    except KeyboardInterrupt:
        print("deltamv: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`deltamv read | head`)
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except BaseException as exc:  # delta-rs' panics are BaseExceptions, not Exceptions
        if isinstance(exc, SystemExit | GeneratorExit):
            raise
        return _unexpected(exc)


def _unexpected(exc: BaseException) -> int:
    """An error deltamv did not expect, still as one line (the trace under -v)."""
    from deltamv.session import write_error_line

    logging.getLogger("deltamv").debug("unexpected error", exc_info=True)
    text = " ".join(str(exc).split())[:500]
    if _jvm_gone(exc):
        write_error_line(
            "deltamv: error: Spark's JVM is gone (it was killed, or crashed: the system log"
            " says whether the out-of-memory killer took it); run the job again, it resumes"
            " where it stopped"
        )
    elif isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        write_error_line(f"deltamv: error: storage failed{where}: {exc.strerror}")
    elif isinstance(exc, MemoryError):
        write_error_line(
            "deltamv: error: out of memory (see spark.driver.memory and the batch size)"
        )
    else:
        write_error_line(
            f"deltamv: internal error: {type(exc).__name__}: {text} (-v shows where; please"
            " report it)"
        )
    return 1


def _jvm_gone(exc: BaseException) -> bool:
    """Whether ``exc`` comes from py4j losing its connection to Spark's JVM."""
    from py4j.protocol import Py4JNetworkError

    from deltamv.errors import exception_chain

    return any(isinstance(e, Py4JNetworkError) for e in exception_chain(exc))


class _QuietPy4J(logging.Filter):
    """Drops py4j's own report of a call the JVM did not answer (logged on the root
    logger, with the trace): deltamv's one line says the JVM is gone (-v keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Exception while sending command")


if __name__ == "__main__":
    sys.exit(main())
