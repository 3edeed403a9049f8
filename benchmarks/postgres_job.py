"""A PostgreSQL job end to end: what `deltamv run` applies under pgbench, and the lag a
reader sees, at a 1-second trigger. Prints a table; asserts nothing but the result.

    .venv/bin/python benchmarks/postgres_job.py [--scale 10] [--seconds 60] [--rate TPS]
                                                [--clients 4] [--json out.json]

1. Starts its own throw-away server (as tests/postgres does), initialises pgbench at
   ``--scale`` (100,000 accounts per unit) and gives ``pgbench_history`` a primary key
   (``id bigserial``; pgbench's insert leaves it to the default).
2. Writes a job config (``[source] kind = "postgres"``, ``trigger_interval = "1
   second"``, the four pgbench tables, the views in ``VIEWS``) and starts ``deltamv run
   CONFIG`` as a subprocess, as a user would; waits for its first versions (the
   snapshot copy).
3. Runs pgbench's TPC-B-like script (``-c 4 -j 2 -T --seconds``, ``-R --rate`` if given).
4. Waits for the job to apply everything (``transactions`` view = PostgreSQL's count of
   ``pgbench_history``, every view at one watermark), then compares each view's latest
   version with the same SQL run by PostgreSQL (a FAILED line if they differ), and stops
   the job (SIGTERM).

Figures, all from what the job committed:

- applied transactions: each pgbench transaction inserts exactly one history row, so
  the ``transactions`` view's count in a version is the number of transactions that
  version includes; applied txn/s = its count in the last version committed before
  pgbench ended / pgbench's run time;
- change rows: the batches' ``events`` in the job's state (change messages read from
  the slot: 3 updates + 1 insert per pgbench transaction), of the batches finished
  before pgbench ended / the run time; and per second of batch work (capacity);
- batch time p50/p99 (the job's state, batches started while pgbench ran);
- reader lag: ``benchmarks/freshness.py``'s ``lag_stats`` over the ``total`` view's
  versions: every 100 ms of the window, now - the watermark (the commit time of the
  newest transaction included) of the newest version committed by then, over pgbench's
  run. A version from before the load counts from pgbench's start (it held every
  transaction there was; now - its watermark would count idle time as lag);
- peak RSS of the job's process tree (driver Python + JVM), the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from _common import PYTHON, ROOT, WORK, TreeRSS, percentile, say
from freshness import lag_stats

sys.path.insert(0, str(ROOT))
from tests.postgres.server import find_bindir, temp_server

from deltamv import delta
from deltamv.postgres import connect, current_wal_lsn
from deltamv.state.store import open_read_only

TABLES = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history"]
VIEWS = {
    "total": "SELECT SUM(abalance) AS total, COUNT(*) AS accounts FROM pgbench_accounts",
    "by_branch": "SELECT bid, SUM(abalance) AS balance, COUNT(*) AS accounts"
    " FROM pgbench_accounts GROUP BY bid",
    "accounts_branches": "SELECT b.bid, COUNT(*) AS accounts, SUM(a.abalance) AS abalance"
    " FROM pgbench_accounts a JOIN pgbench_branches b ON a.bid = b.bid GROUP BY b.bid",
    "tellers": "SELECT bid, SUM(tbalance) AS balance FROM pgbench_tellers GROUP BY bid",
    "transactions": "SELECT COUNT(*) AS transactions, COALESCE(SUM(delta), 0) AS delta"
    " FROM pgbench_history",
}
# Views a run takes only when named by --views.
MORE_VIEWS = {
    # every branch with its history, those with none too: one key's rows grow all run
    "history_by_branch": "SELECT b.bid, COUNT(h.id) AS transactions, SUM(h.delta) AS delta"
    " FROM pgbench_branches b LEFT JOIN pgbench_history h ON h.bid = b.bid GROUP BY b.bid",
}
LAG_VIEW = "total"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def write_config(dest: Path, dsn: str) -> Path:
    lines = [
        "[job]",
        'name = "pgbench"',
        f"checkpoint = {json.dumps(str(dest / 'checkpoint'))}",
        'trigger_interval = "1 second"',
        "",
        "[source]",
        'kind = "postgres"',
        f"dsn = {json.dumps(dsn)}",
    ]
    lines += [line for t in TABLES for line in ("", f"[tables.{t}]")]
    for name, sql in VIEWS.items():
        lines += ["", f"[views.{name}]", f"sql = {json.dumps(sql)}"]
        lines.append(f"path = {json.dumps(str(dest / 'views' / name))}")
    path = dest / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def view_path(dest: Path, name: str) -> str:
    return str(dest / "views" / name)


def latest(dest: Path, name: str) -> delta.VersionInfo | None:
    path = Path(view_path(dest, name))
    if not (path / "_delta_log").is_dir() or not any((path / "_delta_log").glob("*.json")):
        return None
    return delta.versions(str(path))[-1]


def _norm(value: Any) -> Any:
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return value


def rows_of_view(dest: Path, name: str, version: int | None = None) -> list[tuple[Any, ...]]:
    table = delta.read_arrow(view_path(dest, name), version)
    columns = [c for c in table.column_names if not c.startswith("_")]
    data = [table[c].to_pylist() for c in columns]
    return sorted((tuple(_norm(v) for v in row) for row in zip(*data, strict=True)), key=repr)


def rows_of_pg(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(v) for v in row) for row in conn.execute(sql)), key=repr)


def _applied(dest: Path, version: int | None = None) -> int:
    """The pgbench transactions a version of the ``transactions`` view includes."""
    return int(rows_of_view(dest, "transactions", version)[0][0])


def parse_pgbench(out: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if m := re.search(r"number of transactions actually processed: (\d+)", out):
        found["transactions"] = int(m.group(1))
    if m := re.search(r"number of failed transactions: (\d+)", out):
        found["failed"] = int(m.group(1))
    if m := re.search(r"latency average = ([\d.]+) ms", out):
        found["latency_avg_ms"] = float(m.group(1))
    if m := re.search(r"tps = ([\d.]+)", out):
        found["tps"] = float(m.group(1))
    return found


def run(args: argparse.Namespace) -> dict[str, Any]:
    bindir = find_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL binaries: run `make setup`")
    dest = WORK / "postgres_job"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    result: dict[str, Any] = {
        "scale": args.scale,
        "seconds": args.seconds,
        "rate": args.rate,
        "clients": args.clients,
        "trigger": "1 second",
        "views": VIEWS,
        "load_at_start": load(),
    }
    settings = {"max_wal_size": "4GB", "checkpoint_timeout": "30min"}
    with temp_server(bindir, settings) as server:
        env = {**os.environ, **server.libpq_env()}
        pgbench = str(bindir / "pgbench")
        began = time.perf_counter()
        subprocess.run(
            [pgbench, "-i", "-q", "-s", str(args.scale), "postgres"],
            env=env,
            check=True,
            capture_output=True,
        )
        conn = connect(server.dsn())
        conn.execute("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY")
        say(f"pgbench -i -s {args.scale}: {time.perf_counter() - began:.1f} s")
        config = write_config(dest, server.dsn())
        log_path = dest / "job.log"
        job_env = dict(env, DELTAMV_SPARK_LOG_LEVEL="ERROR")
        with open(log_path, "w") as log:
            started = time.perf_counter()
            job = subprocess.Popen(
                [PYTHON, "-m", "deltamv.cli", "run", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=job_env,
            )
            with TreeRSS(job.pid) as rss:
                try:
                    _load_and_measure(args, dest, env, pgbench, conn, job, result, started)
                finally:
                    if job.poll() is None:
                        job.send_signal(signal.SIGTERM)
                        try:
                            job.wait(timeout=120)
                        except subprocess.TimeoutExpired:
                            job.kill()
                            job.wait()
        conn.close()
    result["job_exit"] = job.returncode
    result["peak_rss_mb"] = round(rss.peak / 2**20)
    result["peak_rss_parts_mb"] = {k: round(v / 2**20) for k, v in rss.peak_parts.items()}
    result["job_log"] = str(log_path)
    result["load_at_end"] = load()
    return result


def _load_and_measure(
    args: argparse.Namespace,
    dest: Path,
    env: dict[str, str],
    pgbench: str,
    conn: Any,
    job: subprocess.Popen[bytes],
    result: dict[str, Any],
    started: float,
) -> None:
    while any(latest(dest, v) is None for v in VIEWS):  # the snapshot's versions
        if job.poll() is not None:
            raise SystemExit(f"the job stopped (exit {job.returncode}): see {dest / 'job.log'}")
        time.sleep(0.2)
    result["start_to_first_versions_s"] = round(time.perf_counter() - started, 1)
    say(f"job's first versions after {result['start_to_first_versions_s']} s")
    # The streaming query starts after the first versions (tens of seconds here): one
    # pgbench transaction, applied, shows it is up.
    subprocess.run(
        [pgbench, "-n", "-c", "1", "-t", "1", "postgres"], env=env, check=True, capture_output=True
    )
    while _applied(dest) < 1:
        if job.poll() is not None:
            raise SystemExit(f"the job stopped (exit {job.returncode}): see {dest / 'job.log'}")
        time.sleep(0.2)
    warm = _applied(dest)
    result["start_to_streaming_s"] = round(time.perf_counter() - started, 1)
    say(f"job streaming after {result['start_to_streaming_s']} s")
    command = [pgbench, "-n", "-c", str(args.clients), "-j", "2", "-T", str(args.seconds)]
    if args.rate:
        command += ["-R", str(args.rate)]
    command.append("postgres")
    result["pgbench_command"] = " ".join(["pgbench", *command[1:]])
    result["load_at_pgbench_start"] = load()
    load_began_ms = time.time() * 1000
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    load_ended_ms = time.time() * 1000
    result["load_at_pgbench_end"] = load()
    bench = parse_pgbench(out)
    run_s = (load_ended_ms - load_began_ms) / 1000
    bench["wall_s"] = round(run_s, 2)
    result["pgbench"] = bench
    say(f"pgbench: {bench}")

    # Wait for the job to apply everything pgbench committed.
    expected = conn.execute("SELECT COUNT(*) FROM pgbench_history").fetchone()[0]
    wal_end = current_wal_lsn(conn)
    deadline = time.monotonic() + 600
    caught_up_ms = None
    while time.monotonic() < deadline and job.poll() is None:
        infos = {v: latest(dest, v) for v in VIEWS}
        marks = {i.watermark for i in infos.values() if i is not None}
        if len(marks) == 1 and _applied(dest) == expected:
            caught_up_ms = infos["transactions"].timestamp_ms  # type: ignore[union-attr]
            break
        time.sleep(0.5)
    if caught_up_ms is None:
        result["check"] = "FAILED: the job did not apply every transaction (see its log)"
        return
    result["catch_up_after_pgbench_s"] = round(max(0.0, caught_up_ms - load_ended_ms) / 1000, 2)

    # The views' latest versions against the same SQL on PostgreSQL (no writer left).
    mismatches = []
    for name, sql in VIEWS.items():
        ours, theirs = rows_of_view(dest, name), rows_of_pg(conn, sql)
        if ours != theirs:
            mismatches.append(f"{name}: view {ours[:3]}... != PostgreSQL {theirs[:3]}...")
    result["check"] = "FAILED: " + "; ".join(mismatches) if mismatches else "ok"
    result["views_checked"] = list(VIEWS)
    result["wal_bytes"] = wal_end

    # Applied transactions and change rows while pgbench ran.
    total_infos = delta.versions(view_path(dest, "transactions"))
    in_load = [v for v in total_infos if v.timestamp_ms <= load_ended_ms]
    applied = (_applied(dest, in_load[-1].version) if in_load else warm) - warm
    state = open_read_only(dest / "checkpoint")
    batches = [b for b in state.batches() if b.duration_ms is not None] if state else []
    if state is not None:
        state.close()
    during = [b for b in batches if load_began_ms <= b.started_ms <= load_ended_ms]
    done_in_load = [b for b in batches if b.started_ms + b.duration_ms <= load_ended_ms]
    rows_in_load = sum(b.events for b in done_in_load)
    busy_s = sum(b.duration_ms for b in during) / 1000
    durations = [b.duration_ms for b in during]
    phases: dict[str, list[float]] = {}
    for b in during:
        for k, v in ((b.report or {}).get("phases") or {}).items():
            phases.setdefault(k, []).append(v * 1000)
    result["applied"] = {
        "transactions_in_load": applied,
        "txn_per_s": round(applied / run_s, 1),
        "change_rows_in_load": rows_in_load,
        "change_rows_per_s": round(rows_in_load / run_s, 1),
        "change_rows_per_busy_s": round(sum(b.events for b in during) / busy_s) if busy_s else None,
        "transactions_total": expected,
    }
    result["batches"] = {
        "count_during_load": len(during),
        "p50_ms": percentile(durations, 50),
        "p99_ms": percentile(durations, 99),
        "max_ms": max(durations, default=None),
        "over_1s": sum(1 for d in durations if d > 1000),
        "events_p50": percentile([b.events for b in during], 50),
        "busy_fraction": round(busy_s / run_s, 2),
        "phase_ms_p50": {k: round(percentile(v, 50) or 0) for k, v in phases.items()},
        "phase_ms_p99": {k: round(percentile(v, 99) or 0) for k, v in phases.items()},
    }
    # A version from before the load (the warm-up transaction) holds every transaction
    # committed before pgbench began: its staleness counts from then, not from its
    # watermark (nothing newer existed).
    floor = int(load_began_ms) << 18
    infos = [
        replace(v, watermark=max(v.watermark, floor))
        for v in delta.versions(view_path(dest, LAG_VIEW))
        if v.watermark
    ]
    lag = lag_stats(infos, load_ended_ms, start_ms=load_began_ms, step_ms=100)
    result["lag"] = lag


def table(result: dict[str, Any]) -> str:
    b, a, lag, pg = result["batches"], result["applied"], result["lag"], result["pgbench"]
    rate = f"--rate {result['rate']}" if result["rate"] else "full speed"
    rows = [
        (
            "run",
            f"scale {result['scale']}, {result['clients']} clients, {result['seconds']} s,"
            f" {rate}, trigger 1 s",
        ),
        (
            "load average (1 min) start / pgbench start / pgbench end",
            f"{result['load_at_start']} / {result['load_at_pgbench_start']} /"
            f" {result['load_at_pgbench_end']}",
        ),
        (
            "job start: first versions / streaming",
            f"{result['start_to_first_versions_s']} / {result['start_to_streaming_s']} s",
        ),
        ("pgbench committed", f"{pg.get('transactions')} txn, {pg.get('tps', 0):.0f} txn/s"),
        (
            "job applied while pgbench ran",
            f"{a['transactions_in_load']} txn: {a['txn_per_s']:.0f}"
            f" txn/s, {a['change_rows_per_s']:.0f} change rows/s",
        ),
        ("change rows per second of batch work", f"{a['change_rows_per_busy_s']}"),
        ("caught up after pgbench ended", f"{result.get('catch_up_after_pgbench_s')} s"),
        (
            "batches while pgbench ran",
            f"{b['count_during_load']} (busy {b['busy_fraction']:.0%}"
            f" of the time, {b['over_1s']} over 1 s)",
        ),
        ("batch time p50 / p99 / max", f"{b['p50_ms']} / {b['p99_ms']} / {b['max_ms']} ms"),
        ("batch phases p50 (ms)", ", ".join(f"{k} {v}" for k, v in b["phase_ms_p50"].items())),
        (
            "reader lag p50 / p99 / max",
            f"{lag.get('reader_p50_ms'):.0f} /"
            f" {lag.get('reader_p99_ms'):.0f} / {lag.get('reader_max_ms'):.0f} ms",
        ),
        ("peak RSS of the job (driver + JVM)", f"{result['peak_rss_mb']} MB"),
        ("views' latest versions = PostgreSQL", result["check"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10, help="pgbench scale (1-10 sensible)")
    parser.add_argument("--seconds", type=int, default=60, help="pgbench's run time")
    parser.add_argument("--rate", type=int, help="pgbench -R: a fixed rate (txn/s)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--views", help=f"comma-separated subset of {','.join([*VIEWS, *MORE_VIEWS])}"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.views:
        keep = {"transactions", LAG_VIEW, *args.views.split(",")}  # the run needs these two
        for name in [n for n in VIEWS if n not in keep]:
            del VIEWS[name]
        VIEWS.update({n: sql for n, sql in MORE_VIEWS.items() if n in keep})
    result = run(args)
    if "lag" in result:
        print(table(result), flush=True)
    if result.get("check") != "ok":
        print(f"FAILED: {result.get('check')}", flush=True)
    if args.json:
        result["lag"] = {k: v for k, v in result.get("lag", {}).items() if k != "reader_samples"}
        args.json.write_text(json.dumps(result, indent=2, default=str))
    sys.exit(0 if result.get("check") == "ok" else 1)


if __name__ == "__main__":
    main()
