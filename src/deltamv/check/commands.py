"""The ``check``, ``status`` and ``read`` subcommands: parse, call the library, print.

``deltamv.cli`` registers them through :func:`register_commands`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from deltamv import tso
from deltamv.errors import DeltaMVError

if TYPE_CHECKING:
    from deltamv.check.status import Backlog, SlotView

__all__ = ["print_check_report", "print_slot", "print_status", "register_commands"]


def register_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check", help="check every version of every view: invariants, watermarks, truth"
    )
    check.add_argument("config", help="the job's TOML config")
    check.add_argument(
        "--truth", metavar="DIR", help="a simulator run (or its truth/) to compare with"
    )
    check.add_argument(
        "--view", action="append", metavar="NAME", help="only this view (repeatable)"
    )
    check.set_defaults(func=_check)

    status = sub.add_parser(
        "status", help="freshness of each view and what holds the watermark back"
    )
    status.add_argument("config", help="the job's TOML config")
    status.set_defaults(func=_status)

    read = sub.add_parser("read", help="read views as of a watermark or time, consistently")
    read.add_argument("config", help="the job's TOML config")
    which = read.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--view", metavar="NAME", help="one view (or a table kept as a copy, by its name)"
    )
    which.add_argument("--views", metavar="A,B", help="several views at one common watermark")
    when = read.add_mutually_exclusive_group()
    when.add_argument("--as-of-watermark", type=int, metavar="TS", help="a TSO watermark")
    when.add_argument("--as-of-time", metavar="ISO", help="an ISO-8601 time (UTC if no zone)")
    read.add_argument("--format", choices=["table", "csv", "parquet"], default="table")
    read.add_argument(
        "--out", metavar="PATH", help="output file (one view) or folder (several); stdout for csv"
    )
    read.add_argument("--limit", type=int, default=50, help="rows shown by --format table")
    read.set_defaults(func=_read)


# -- check ---------------------------------------------------------------------------------
def _check(args: argparse.Namespace) -> int:
    from deltamv.check.invariants import check_job, views_to_check
    from deltamv.cli import quiet_query_context_logs
    from deltamv.config import load_config
    from deltamv.session import build_spark

    quiet_query_context_logs(args.verbose)
    config = load_config(args.config)
    views_to_check(config, args.view)  # before Spark starts: unknown views, no versions yet
    truth = None
    if args.truth:
        from deltamv.sim import Truth

        truth = Truth.load(args.truth)
        missing = sorted(set(config.tables) - set(truth.tables))
        if missing:  # (its views would be compared with empty tables)
            raise DeltaMVError(
                f"--truth {args.truth}: its run ({truth.meta.get('workload', 'unknown')!r}"
                f" workload) lacks {'tables' if len(missing) > 1 else 'table'}"
                f" {', '.join(map(repr, missing))} of job {config.name!r} (its tables:"
                f" {', '.join(sorted(truth.tables)) or 'none'}):"
                " give the simulator run this job reads"
            )
    spark = build_spark(config)
    report = check_job(spark, config, truth=truth, views=args.view)
    print_check_report(report)
    return 0 if report.ok else 1


def print_check_report(report: Any, console: Console | None = None) -> None:
    """The check's table: per view, versions, invariants held, the first violation."""
    out = console or Console(width=max(120, Console().width))
    title = "deltamv check" + (" (with ground truth)" if report.with_truth else "")
    table = Table(title=title)
    table.add_column("view")
    table.add_column("versions", justify="right")
    table.add_column("invariants held", justify="right")
    if report.with_truth:
        table.add_column("= truth", justify="right")
    table.add_column("first violation")
    for v in report.views:
        first = v.violations[0] if v.violations else None
        where = (
            f"{first.check} at version {first.version}, watermark {first.watermark}: {first.detail}"
            if first is not None
            else "none"
        )
        row = [v.view, str(v.versions), f"{v.invariants_held}/{len(v.invariants)}"]
        if report.with_truth:
            row.append(
                f"{v.truth_checked - len([x for x in v.violations if x.check == 'truth'])}/{v.truth_checked}"
            )
        row.append(f"[red]{where}[/red]" if first is not None else "[green]none[/green]")
        table.add_row(*row)
    out.print(table)
    # A view whose rows nothing looked at (no invariant, no ground truth): only its
    # watermarks were checked; say so rather than claim its rows are right.
    unchecked = [v.view for v in report.views if not v.invariants and not v.truth_checked]
    if report.ok and unchecked and len(unchecked) == len(report.views):
        out.print(
            "[green]OK[/green]: every version carries a watermark and they never decrease;"
            " no invariants are declared for these views and no --truth was given, so their"
            " rows were not checked"
        )
    elif report.ok and unchecked:
        out.print(
            "[green]OK[/green]: every version of every view is consistent where checked;"
            f" the rows of {', '.join(unchecked)} were not checked (no invariants, no truth),"
            " only their watermarks"
        )
    elif report.ok:
        out.print("[green]OK[/green]: every version of every view is consistent")
    else:
        out.print(f"[red]FAILED[/red]: {len(report.violations)} violation(s)")
        for violation in report.violations[:10]:
            out.print(f"  {violation}", markup=False)


# -- status --------------------------------------------------------------------------------
def _status(args: argparse.Namespace) -> int:
    from deltamv.check.status import job_status
    from deltamv.config import load_config

    print_status(job_status(load_config(args.config)))
    return 0


def print_status(status: Any, console: Console | None = None) -> None:
    out = console or Console(width=max(120, Console().width))
    now = status.now_ms
    table = Table(title=f"deltamv status: job {status.job}")
    for col in ("view", "version", "watermark", "watermark time (UTC)", "lag now", "versions",
                "maintained"):  # fmt: skip
        table.add_column(
            col, justify="right" if col in ("version", "versions", "lag now") else "left"
        )
    for v in status.views:
        _status_row(table, v, v.view, now)
    for c in status.copies:
        _status_row(table, c, f"table {c.view}", now)
    out.print(table)
    if status.slot is not None:
        print_slot(out, status.slot, loaded=status.bootstrapped)
    if not status.state_found:
        out.print(
            f"the job has not run yet (no state in {status.checkpoint}):"
            " start it with `deltamv run CONFIG`"
        )
        return
    running = f"running (pid {status.running_pid})" if status.running_pid else "not running"
    last = "none yet" if status.last_batch is None else str(status.last_batch)
    out.print(f"job: {running}; {status.batches} batch(es), last batch {last}")
    if not any(v.latest_version is not None for v in status.views):
        if status.last_batch is None:
            why = (
                "no batch has finished (a run that stopped on an error said why in its last"
                " line; run it again to see it)"
            )
        else:
            why = "the batches read so far did not resolve past the job's start" + (
                " (see what held the last one back below; the log may hold more than they read)"
                if status.blocker is not None
                else ""
            )
        out.print(f"no view has a version yet: {why}")
    if status.job_watermark:
        out.print(
            f"global watermark: {status.job_watermark} ({_when(status.job_watermark)}), "
            f"lag now {_ms(tso.lag_ms(status.job_watermark, now))}"
        )
    if status.last_duration_ms is not None:
        out.print(f"last batch took {_ms(status.last_duration_ms)}")
    log = status.backlog
    if log is not None:
        out.print(f"change log: {_backlog(log)}", markup=False)
    b = status.blocker
    if b is not None:
        out.print(f"held back by: {b.describe()}", markup=False)
        out.print(f"  its resolved ts: {b.ts} ({_when(b.ts)})")
        if log is not None and b.region is not None and log.segments.get(b.region):
            n = log.segments[b.region]
            out.print(f"  its region has {n} segment{'s' if n > 1 else ''} not read yet:"
                      " the job is behind its log, which may resolve further")  # fmt: skip
        if b.resolved_since_ms is not None:
            out.print(
                f"  unchanged since {_clock(b.resolved_since_ms)} "
                f"({_ms(now - b.resolved_since_ms)} ago)"
            )
        if b.watermark_since_ms is not None:
            out.print(
                f"  global watermark unchanged since {_clock(b.watermark_since_ms)} "
                f"({_ms(now - b.watermark_since_ms)} ago)"
            )


def _backlog(log: Backlog) -> str:
    if log.error:
        return f"cannot list it ({log.error})"
    if not log.total:
        return "every segment read"
    regions = len(log.segments)
    return (f"{log.total} segment{'s' if log.total > 1 else ''} ({_bytes(log.bytes)}) in"
            f" {regions} region{'s' if regions > 1 else ''} not read yet")  # fmt: skip


def _status_row(table: Table, v: Any, name: str, now: int) -> None:
    mode = v.mode or "-"
    if v.latest_version is None:
        table.add_row(name, "-", "-", "no version yet", "-", "0", mode)
        return
    table.add_row(
        name, str(v.latest_version), str(v.watermark) if v.watermark is not None else "-",
        _when(v.watermark), _ms(v.lag_ms(now)), str(v.versions), mode,
    )  # fmt: skip


def print_slot(out: Console, slot: SlotView, *, loaded: bool = False) -> None:
    """A PostgreSQL job's replication slot, in one line (part of ``deltamv status``).
    ``loaded``: the job has loaded its snapshot (so it created its slot)."""
    if slot.error:
        out.print(
            f"replication slot {slot.name}: cannot ask PostgreSQL ({slot.error})", markup=False
        )
    elif not slot.found and loaded:
        out.print(
            f"replication slot {slot.name}: GONE, dropped outside deltamv after the job"
            " loaded its snapshot: the job refuses to start without it (the changes since"
            " are lost to it); start it with a new checkpoint and new output paths",
            markup=False,
        )
    elif not slot.found:
        out.print(f"replication slot {slot.name}: none yet (the job creates it on its first run)")
    elif slot.lost:
        out.print(
            f"replication slot {slot.name}: INVALIDATED by PostgreSQL (the WAL it held was"
            " removed); the job cannot continue from it"
        )
    else:
        out.print(
            f"replication slot {slot.name}: confirmed at {slot.confirmed_lsn}, holds"
            f" {_bytes(slot.retained_bytes)} of WAL; {_behind(slot)}"
        )


def _behind(slot: SlotView) -> str:
    """The WAL after the slot's confirmed position. It may hold no change to the job's
    tables (other tables, vacuum, checkpoints), and a running job may have read some of
    it already: it is what the job has not confirmed yet."""
    if slot.lag_bytes is None:
        return "the WAL after it is unknown"
    if not slot.lag_bytes:
        return "no WAL after it"
    age = f"; its last commit applied is {_ms(slot.lag_ms)} old" if slot.lag_ms else ""
    return (f"{_bytes(slot.lag_bytes)} of WAL after it not confirmed yet (it may hold no"
            f" change to the job's tables{age})")  # fmt: skip


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


# -- read ----------------------------------------------------------------------------------
def _read(args: argparse.Namespace) -> int:
    from deltamv.config import load_config
    from deltamv.reader import pick

    config = load_config(args.config)
    names = [args.view] if args.view else [n.strip() for n in args.views.split(",") if n.strip()]
    _check_read_args(args, names)
    snap = pick(config, names, as_of_watermark=args.as_of_watermark, as_of_time=args.as_of_time)
    tables = snap.arrow_tables()
    console = Console(stderr=args.format != "table", width=max(120, Console().width))
    versions = ", ".join(f"{n} v{snap.versions[n].version}" for n in names)
    console.print(f"watermark {snap.watermark} ({_when(snap.watermark)}): {versions}")
    if args.format == "table":
        for name in names:
            _print_rows(console, name, tables[name], args.limit)
        return 0
    for name in names:
        target = _target(args.out, name, args.format, several=len(names) > 1)
        try:
            _write(tables[name], target, args.format)
        except OSError as exc:
            raise DeltaMVError(f"--out: cannot write {target}: {exc.strerror or exc}") from None
        if target is not None:
            console.print(f"{name}: {tables[name].num_rows} row(s) -> {target}")
    return 0


def _check_read_args(args: argparse.Namespace, names: list[str]) -> None:
    """What ``deltamv read`` refuses before it reads anything."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DeltaMVError(f"--views names {', '.join(twice)} more than once")
    if not names:
        raise DeltaMVError("--views names no view")
    if args.limit < 0:
        raise DeltaMVError(f"--limit must be 0 or more, not {args.limit}")
    if args.out is None and args.format == "parquet":
        raise DeltaMVError("--format parquet needs --out PATH")
    if args.out is None and args.format == "csv" and len(names) > 1:
        raise DeltaMVError("--format csv of several views needs --out FOLDER (a file per view)")


def _target(out: str | None, view: str, fmt: str, *, several: bool) -> Path | None:
    if out is None:
        return None
    if several:
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as exc:
            raise DeltaMVError(
                f"--out: cannot create folder {out}: {exc.strerror or exc}"
            ) from None
        return Path(out) / f"{view}.{fmt}"
    return Path(out)


def _write(table: pa.Table, target: Path | None, fmt: str) -> None:
    import sys

    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert target is not None
        pq.write_table(table, target)
        return
    import pyarrow.csv as pacsv

    if target is None:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode("utf-8"))
        return
    pacsv.write_csv(table, target)


def _print_rows(console: Console, name: str, table: pa.Table, limit: int) -> None:
    title = f"{name} ({table.num_rows} row(s))"
    shown = Table(title=title, min_width=len(title) + 4)
    for col in table.column_names:
        shown.add_column(col)
    for row in table.slice(0, limit).to_pylist():
        shown.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    console.print(shown)
    if table.num_rows > limit:
        console.print(f"... {table.num_rows - limit} more row(s) (--limit)")


# -- formatting ----------------------------------------------------------------------------
def _when(ts: int | None) -> str:
    if ts is None:
        return "-"
    if ts == 0:
        return "start"
    return tso.to_datetime(ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _clock(ms: int) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    if abs(ms) < 10_000:
        return f"{ms} ms"
    if abs(ms) < 3_600_000:
        return f"{ms / 1000:.1f} s"
    if abs(ms) < 172_800_000:
        return f"{ms / 3_600_000:.1f} h"
    return f"{ms / 86_400_000:.0f} d"
