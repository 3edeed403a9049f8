"""The ``deltamv`` command line (CONTRACT section 5). Parses arguments, calls the library."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence

from deltamv.errors import DeltaMVError


def _run(args: argparse.Namespace) -> int:
    from deltamv.config import load_config
    from deltamv.job import run

    config = load_config(args.config)
    # SIGTERM stops a continuous job like Ctrl-C: the current batch finishes or is
    # replayed on restart, never half-committed.
    signal.signal(signal.SIGTERM, _interrupt)
    run(config, once=args.once)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


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
    parser.add_argument("-v", "--verbose", action="store_true", help="log Spark's warnings too")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a view job (CONTRACT section 5)")
    run.add_argument("config", help="the job's TOML config")
    run.add_argument(
        "--once", action="store_true", help="process what the log holds now, then exit"
    )
    run.set_defaults(func=_run)

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

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[
    Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
]:
    """Subcommands living beside their library code (check, status, read)."""
    found: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = []
    try:
        from deltamv.check.commands import register_commands
    except ImportError:
        return found
    found.append(register_commands)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    if not args.verbose:
        logging.getLogger("py4j").setLevel(logging.ERROR)
    try:
        return int(args.func(args))
    except DeltaMVError as exc:
        print(f"deltamv: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("deltamv: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
