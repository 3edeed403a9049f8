"""The account-transfer demo: ``make demo`` (``python -m deltamv.demo``).

Three things run side by side for about a minute:

1. the simulated bank (``deltamv.sim``, live): transfers between 1000 accounts, and now
   and then a large transaction redistributing money across hundreds of accounts;
2. the deltamv view job (``deltamv run``, continuous, in its own process) following the
   change log and committing one Delta version per view per micro-batch;
3. an eventually consistent baseline on the same change log, in this process: every
   committed row is applied as soon as its region's segment arrives, newest commit per
   key wins, with no watermark and no transaction grouping across regions.

Beside them, two more live runs of the same bank, one per watermark mode (``start-ts``
and ``min-commit-ts``), measure the global watermark's lag while large transactions run.

Then ``deltamv check`` runs over every version of every view (invariants and the
simulator's ground truth), a short report is printed, and ``demo-out/`` receives the
plots, the report and the whole run (change logs, views, job state).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deltamv import tso
from deltamv.sim import workload_toml
from deltamv.sim.workloads import Bank
from deltamv.state import STATE_FILE, open_read_only

MARKER = ".deltamv-demo"


def job_toml(trigger: str) -> str:
    """The demo's view job: the bank workload's views and invariants (see examples/bank),
    reading the change log the demo publishes into ``../feed``."""
    return workload_toml(
        Bank, name="bank-demo", changelog="../feed", checkpoint="_checkpoint",
        view_dir="views", trigger_interval=trigger, spark_master="local[2]",
        spark_conf={"spark.sql.shuffle.partitions": "2"},
        comment="The demo's view job: the bank workload's views and invariants (see examples/bank).",
    )  # fmt: skip


@dataclass(frozen=True)
class DemoOptions:
    out: Path = Path("demo-out")
    duration: float = 60.0  # seconds the live bank runs
    rate: float = 100.0  # transactions per second
    large_every: int = 300  # every n-th transaction is large
    large_size: int = 300  # rows of a large transaction
    large_prewrite_ms: int = 1500  # how long a large transaction prewrites
    seed: int = 7
    trigger: str = "1 second"
    catch_up_timeout: float = 180.0  # seconds the job may take after the bank stops


# -- the simulated upstreams (child processes) ----------------------------------------------
def _simulate(out: str, summary: str, kwargs: dict[str, Any]) -> None:
    """Child process: one live simulation; writes a JSON summary when done."""
    from deltamv.sim import simulate

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    result = simulate("bank", out, live=True, **kwargs)
    data = {
        "events": result.events,
        "transactions": result.transactions,
        "aborted": result.aborted,
        "segments": result.segments,
        "final_watermark": result.final_watermark,
        "large_txns": [asdict(s) for s in result.large_txns],
    }
    Path(summary).write_text(json.dumps(data))


def _start_sim(ctx: Any, out: Path, mode: str, opts: DemoOptions) -> tuple[Any, Path]:
    summary = out.parent / f"{out.name}.summary.json"
    kwargs = dict(
        duration=opts.duration, seed=opts.seed, rate=opts.rate, watermark_mode=mode,
        large_every=opts.large_every, large_size=opts.large_size,
        large_prewrite_ms=opts.large_prewrite_ms, regions=4, splits=2,
    )  # fmt: skip
    proc = ctx.Process(target=_simulate, args=(str(out), str(summary), kwargs), daemon=True)
    proc.start()
    return proc, summary


# -- the eventually consistent baseline -------------------------------------------------------
@dataclass
class Baseline:
    """Applies committed rows as their segments arrive: no watermark, no transactions.

    A COMMIT applies the transaction's rows prewritten in that region at once; rows of
    the same transaction in other regions come whenever their regions' segments do.
    Newest commit per key wins (so re-emitted rows never move a key backwards).
    """

    changelog: Path
    feed: Path | None = None  # where the view job reads: each segment is hard-linked here
    read: dict[int, int] = field(default_factory=dict)  # region -> segments read
    pending: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)
    balance: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (commit_ts, bal)
    total: int = 0
    events: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)  # (unix s, SUM(balance))

    def poll(self) -> None:
        from deltamv.sim._io import list_changelog, read_segment

        segments, _problems = list_changelog(self.changelog)
        for region, segs in sorted(segments.items()):
            for seg in segs[self.read.get(region, 0) :]:
                for event in read_segment(seg.path):
                    if isinstance(event, dict):
                        self._event(region, event)
                self.read[region] = self.read.get(region, 0) + 1
                if self.feed is not None:  # the same file, published to the job in seq order
                    target = self.feed / f"region-{region}"
                    target.mkdir(exist_ok=True)
                    os.link(seg.path, target / Path(seg.path).name)
        if self.balance:
            self.samples.append((time.time(), self.total))

    def _event(self, region: int, e: dict[str, Any]) -> None:
        self.events += 1
        kind = e.get("type")
        if kind == "PREWRITE":
            self.pending.setdefault((region, e["start_ts"]), []).append(e)
        elif kind == "COMMIT":
            for row in self.pending.pop((region, e["start_ts"]), []):
                self._apply(row, e["commit_ts"])
        elif kind == "ROLLBACK":
            self.pending.pop((region, e["start_ts"]), None)
        elif kind == "COMMITTED":
            self._apply(e, e["commit_ts"])

    def _apply(self, row: dict[str, Any], commit_ts: int) -> None:
        if row.get("table") != "accounts":
            return
        key = row["key"]
        old = self.balance.get(key)
        if old is not None and old[0] >= commit_ts:
            return
        self.total -= old[1] if old else 0
        if row.get("op") == "DELETE":
            self.balance[key] = (commit_ts, 0)
        else:
            amount = int((row.get("value") or {}).get("balance") or 0)
            self.balance[key] = (commit_ts, amount)
            self.total += amount


# -- watermark lag from a change log ----------------------------------------------------------
def watermark_lag(run: Path) -> list[tuple[float, float]]:
    """(publish time s, lag ms) each time segments were published, replaying them in order.

    A reader that reads every segment the moment it appears sees, at that moment, the
    global watermark of everything published so far (``ReferenceReader``); its lag is the
    publish time minus the watermark's physical time. This is the mode's own lag, without
    any processing delay of the job.
    """
    from deltamv.sim._io import list_changelog
    from deltamv.sim.reference import ReferenceReader

    reader = ReferenceReader.for_run(run)
    segments, _ = list_changelog(run / "changelog")
    files = sorted(
        (os.stat(s.path).st_mtime_ns, region, s.seq, s.path)
        for region, segs in segments.items()
        for s in segs
    )
    points: list[tuple[float, float]] = []
    i = 0
    while i < len(files):
        # One publication round: everything written within 20 ms of its first file.
        first = files[i][0]
        while i < len(files) and files[i][0] - first < 20_000_000:
            _, region, _, path = files[i]
            reader.feed_segment(region, path)
            i += 1
        published_ms = files[i - 1][0] / 1e6
        watermark = reader.global_watermark()
        if watermark > 0:
            points.append((published_ms / 1000, published_ms - tso.physical_ms(watermark)))
    return points


# -- the demo -----------------------------------------------------------------------------------
def run_demo(opts: DemoOptions, console: Console | None = None) -> dict[str, Any]:
    """Run the whole demo into ``opts.out``; returns the report's numbers."""
    console = console or Console()
    out = _prepare(opts.out)
    job_dir = out / "job"
    job_dir.mkdir()
    config_path = job_dir / "bank.toml"
    config_path.write_text(job_toml(opts.trigger))
    ctx = mp.get_context("spawn")
    started = time.time()
    sim: Any = None
    lag_runs: dict[str, tuple[Any, Path]] = {}

    console.rule("[bold]deltamv account-transfer demo")
    console.print(
        f"bank: {opts.rate:.0f} transfers/s for {opts.duration:.0f} s, a large transaction "
        f"({opts.large_size} rows, {opts.large_prewrite_ms} ms prewrite) every "
        f"{opts.large_every} transactions; output in {out}/"
    )
    (out / "feed").mkdir()
    job_log = (out / "job.log").open("w")
    env = dict(os.environ, SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    job = subprocess.Popen(
        [sys.executable, "-m", "deltamv.cli", "run", str(config_path)],
        stdout=job_log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    baseline = Baseline(out / "bank" / "changelog", feed=out / "feed")
    total_view = job_dir / "views" / "total_balance"
    views = [job_dir / "views" / name for name in Bank.views]
    try:
        with _progress(console) as progress:
            warm = progress.add_task("starting the view job (Spark)", info="", total=None)
            deadline = time.time() + 300
            while not (job_dir / "_checkpoint" / STATE_FILE).exists():
                if job.poll() is not None or time.time() > deadline:
                    raise SystemExit(f"the view job did not start; see {out / 'job.log'}")
                time.sleep(0.2)
            progress.remove_task(warm)
            sim, sim_summary = _start_sim(ctx, out / "bank", "min-commit-ts", opts)
            lag_runs = {
                mode: _start_sim(ctx, out / f"lag-{mode}", mode, opts)
                for mode in ("start-ts", "min-commit-ts")
            }
            started = time.time()
            while not (out / "bank" / "changelog").exists():
                time.sleep(0.05)
            live = progress.add_task("live: bank, job, baseline", info="", total=opts.duration)
            while sim.is_alive():
                _tick(
                    progress, live, baseline, total_view, min(time.time() - started, opts.duration)
                )
            progress.update(live, completed=opts.duration)
            sim.join()
            summary = json.loads(sim_summary.read_text())
            final = int(summary["final_watermark"])
            catch = progress.add_task("job catching up", info="", total=None)
            deadline = time.time() + opts.catch_up_timeout
            while time.time() < deadline:
                _tick(progress, catch, baseline, total_view, None)
                if all(_watermark(v) >= final for v in views):
                    break
                if job.poll() is not None:
                    raise SystemExit(f"the view job exited early; see {out / 'job.log'}")
            else:
                console.print("[yellow]the job did not reach the final watermark in time[/yellow]")
            progress.update(catch, total=1.0, completed=1.0)
            baseline.poll()
            stop = progress.add_task("stopping the job", info="", total=None)
            _stop(job)
            progress.remove_task(stop)
            for proc, _ in lag_runs.values():
                proc.join()
    finally:
        if job.poll() is None:
            _stop(job)
        job_log.close()
        for proc in [sim, *(p for p, _ in lag_runs.values())] if sim is not None else []:
            if proc.is_alive():
                proc.terminate()

    console.print("running [bold]deltamv check[/bold] (invariants and ground truth, every version)")
    check = _run_check(config_path, out / "bank", console)
    report = _report(out, opts, baseline, total_view, summary, check, lag_runs, started)
    _plot(out, report, baseline, total_view, lag_runs, started)
    _print_report(console, report)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def _prepare(out: Path) -> Path:
    out = out.resolve()
    if out.exists():
        if not (out / MARKER).exists() and any(out.iterdir()):
            raise SystemExit(
                f"{out} exists and does not hold a previous demo: choose another --out"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by python -m deltamv.demo; removed by the next run\n")
    return out


@contextlib.contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        transient=False,
    ) as progress:
        yield progress


def _tick(
    progress: Progress, task: Any, baseline: Baseline, total_view: Path, completed: float | None
) -> None:
    baseline.poll()
    latest = _latest(total_view)
    if latest is None:
        deltamv = "job starting (Spark)"
    else:
        version, watermark, total = latest
        deltamv = f"deltamv v{version} SUM={total:,} lag {tso.lag_ms(watermark) / 1000:.1f}s"
    info = f"baseline SUM={baseline.total:,} | {deltamv}"
    if completed is None:
        progress.update(task, info=info)
    else:
        progress.update(task, completed=completed, info=info)
    time.sleep(0.3)


def _latest(total_view: Path) -> tuple[int, int, int] | None:
    from deltamv import delta

    path = str(total_view)
    if delta.table_version(path) is None:
        return None
    info = delta.versions(path)[-1]
    rows = delta.read_arrow(path, info.version).to_pylist()
    return info.version, info.watermark or 0, int(rows[0]["total"] or 0) if rows else 0


def _watermark(view: Path) -> int:
    from deltamv import delta

    if delta.table_version(str(view)) is None:
        return -1
    return delta.versions(str(view))[-1].watermark or -1


def _stop(job: subprocess.Popen[Any]) -> None:
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()


def _run_check(config_path: Path, truth: Path, console: Console) -> dict[str, Any]:
    from deltamv.check.commands import print_check_report
    from deltamv.check.invariants import check_job
    from deltamv.config import load_config
    from deltamv.session import build_spark
    from deltamv.sim import Truth

    config = load_config(config_path)
    spark = build_spark(config)
    try:
        report = check_job(spark, config, truth=Truth.load(truth))
        native = _read_with_delta_spark(spark, config, console)
    finally:
        spark.stop()
    print_check_report(report, console)
    return {
        "delta_spark": native,
        "ok": report.ok,
        "views": {
            v.view: {
                "versions": v.versions,
                "invariants": len(v.invariants),
                "held": v.invariants_held,
                "truth_checked": v.truth_checked,
            }
            for v in report.views
        },
        "violations": [str(v) for v in report.violations],
    }


def _read_with_delta_spark(spark: Any, config: Any, console: Console) -> dict[str, Any] | None:
    """Each view's latest version as a Spark user reads it: delta-spark, DESCRIBE HISTORY."""
    from deltamv.session import delta_spark_available

    if not delta_spark_available(spark):
        console.print("delta-spark: not on this session (`make setup` fetches its jars)")
        return None
    seen = {}
    for name, view in config.views.items():
        last = spark.sql(f"DESCRIBE HISTORY delta.`{view.path}` LIMIT 1").first()
        rows = spark.read.format("delta").option("versionAsOf", last.version).load(view.path)
        watermark = json.loads(last.userMetadata)["deltamv.watermark"]
        seen[name] = {"version": last.version, "watermark": watermark, "rows": rows.count()}
    console.print(
        "delta-spark reads the views (DESCRIBE HISTORY, versionAsOf): "
        + ", ".join(f"{n} v{v['version']} at watermark {v['watermark']}" for n, v in seen.items())
    )
    return seen


def _view_history(total_view: Path) -> list[dict[str, Any]]:
    from deltamv import delta

    rows = []
    for info in delta.versions(str(total_view)):
        data = delta.read_arrow(str(total_view), info.version).to_pylist()
        total = data[0]["total"] if data else None
        rows.append(
            {"version": info.version, "watermark": info.watermark, "committed_s": info.timestamp_ms / 1000,
             "total": total}
        )  # fmt: skip
    return rows


def _report(
    out: Path,
    opts: DemoOptions,
    baseline: Baseline,
    total_view: Path,
    summary: dict[str, Any],
    check: dict[str, Any],
    lag_runs: dict[str, tuple[Any, Path]],
    started: float,
) -> dict[str, Any]:
    history = _view_history(total_view)
    true_total = None
    from deltamv.sim import Truth

    truth = Truth.load(out / "bank")
    tables = truth.tables_at(int(summary["final_watermark"]))
    true_total = sum(v for v in tables["accounts"].column("balance").to_pylist() if v is not None)
    totals = [h["total"] for h in history]
    drift = [t - true_total for _, t in baseline.samples]
    lags = {}
    for mode, (_proc, summ) in lag_runs.items():
        points = watermark_lag(out / f"lag-{mode}")
        values = sorted(lag for _, lag in points)
        stats = json.loads(summ.read_text()) if summ.exists() else {"large_txns": []}
        large = [s for s in stats["large_txns"] if s.get("commit_ts") is not None]
        lags[mode] = {
            "median_ms": statistics.median(values) if values else None,
            "p95_ms": values[int(0.95 * (len(values) - 1))] if values else None,
            "max_ms": values[-1] if values else None,
            "large_txns": len(large),
            "held_ms_mean": statistics.mean(s["held_ms"] for s in large) if large else None,
            "points": points,
            "large": large,
        }
    batches = _batches(out / "job" / "_checkpoint")
    committed = [b for b in batches if b["duration_ms"] is not None]
    return {
        "options": {k: str(v) for k, v in asdict(opts).items()},
        "started": started,
        "bank": summary,
        "true_total": true_total,
        "deltamv": {
            "versions": len(history),
            "distinct_totals": sorted({t for t in totals if t is not None}),
            "history": history,
            "batches": len(batches),
            "batch_ms_median": statistics.median(b["duration_ms"] for b in committed)
            if committed
            else None,
            "commit_lag_ms_median": statistics.median(b["lag_ms"] for b in batches)
            if batches
            else None,
        },
        "baseline": {
            "samples": len(baseline.samples),
            "min": min(t for _, t in baseline.samples) if baseline.samples else None,
            "max": max(t for _, t in baseline.samples) if baseline.samples else None,
            "max_abs_drift": max(abs(d) for d in drift) if drift else None,
            "off_fraction": sum(1 for d in drift if d) / len(drift) if drift else None,
            "final": baseline.total,
        },
        "lag": lags,
        "check": check,
    }


def _batches(checkpoint: Path) -> list[dict[str, Any]]:
    state = open_read_only(checkpoint)
    if state is None:
        return []
    try:
        records = state.batches()
    finally:
        state.close()
    return [
        {"batch": r.batch, "watermark": r.watermark, "started_ms": r.started_ms,
         "duration_ms": r.duration_ms,
         "lag_ms": r.started_ms + (r.duration_ms or 0) - tso.physical_ms(r.watermark)}
        for r in records if r.watermark
    ]  # fmt: skip


# -- plots ----------------------------------------------------------------------------------
def _plot(
    out: Path,
    report: dict[str, Any],
    baseline: Baseline,
    total_view: Path,
    lag_runs: dict[str, tuple[Any, Path]],
    started: float,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    true_total = report["true_total"]
    history = report["deltamv"]["history"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True, height_ratios=[3, 2])
    bx = [t - started for t, _ in baseline.samples]
    by = [v for _, v in baseline.samples]
    dx = [h["committed_s"] - started for h in history if h["total"] is not None]
    dy = [h["total"] for h in history if h["total"] is not None]
    top.plot(
        bx, by, color="tab:red", lw=1.2, label="eventually consistent baseline (per poll, ~0.3 s)"
    )
    top.step(
        dx, dy, where="post", color="tab:blue", lw=2.2, label="deltamv total_balance (per version)"
    )
    top.plot(dx, dy, "o", color="tab:blue", ms=4)
    top.axhline(
        true_total, color="black", ls="--", lw=0.8, label=f"money in the bank ({true_total:,})"
    )
    for ax in (top, bottom):
        for i, stat in enumerate(report["bank"]["large_txns"]):
            begin = tso.physical_ms(stat["start_ts"]) / 1000 - started
            ax.axvspan(
                begin, begin + stat["prewrite_ms"] / 1000, color="grey", alpha=0.2,
                label="large transaction prewriting" if i == 0 and ax is top else None,
            )  # fmt: skip
    if dx:
        top.annotate(
            "first deltamv version\n(Spark warm-up, first batch)", xy=(dx[0], dy[0]),
            xytext=(dx[0], true_total + 0.6 * (max(by, default=true_total) - true_total) + 1),
            ha="center", fontsize=8, arrowprops={"arrowstyle": "->", "color": "tab:blue"},
        )  # fmt: skip
    top.set_ylabel("SUM(balance) (money units)")
    top.set_title("SUM(balance) while transfers run: deltamv stays exact, the baseline drifts")
    top.legend(loc="best", fontsize=9)
    top.ticklabel_format(axis="y", style="plain", useOffset=False)
    top.grid(alpha=0.3)
    bottom.plot(bx, [v - true_total for v in by], color="tab:red", lw=1.2, label="baseline")
    bottom.step(
        dx, [v - true_total for v in dy], where="post", color="tab:blue", lw=2.2, label="deltamv"
    )
    bottom.axhline(0, color="black", lw=0.8)
    bottom.set_ylabel("error: SUM(balance) - true total")
    bottom.set_xlabel("seconds since the demo started (wall clock)")
    bottom.legend(loc="best", fontsize=9)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "sum_balance.png", dpi=120)
    plt.close(fig)

    modes = list(report["lag"])
    fig, axes = plt.subplots(len(modes), 1, figsize=(11, 7.5), sharex=True, sharey=True)
    colors = {"start-ts": "tab:orange", "min-commit-ts": "tab:green"}
    for ax, mode in zip(axes, modes, strict=True):
        data = report["lag"][mode]
        points = data["points"]
        t0 = points[0][0] if points else 0.0
        ax.plot(
            [t - t0 for t, _ in points], [lag / 1000 for _, lag in points],
            color=colors.get(mode, "tab:blue"), lw=1.2, marker=".", ms=3,
            label=f"{mode}: median {data['median_ms'] or 0:.0f} ms, max {data['max_ms'] or 0:.0f} ms",
        )  # fmt: skip
        for i, s in enumerate(data["large"]):
            begin = tso.physical_ms(s["start_ts"]) / 1000 - t0
            ax.axvspan(
                begin, begin + s["prewrite_ms"] / 1000, color="grey", alpha=0.25,
                label="large transaction prewriting" if i == 0 else None,
            )  # fmt: skip
        ax.set_title(f"watermark mode {mode}")
        ax.set_ylabel("watermark lag (s)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=9)
    axes[-1].set_xlabel("seconds since the run started (wall clock)")
    fig.suptitle(
        "Global watermark lag while large transactions run (lag = publish time - watermark time)"
    )
    fig.tight_layout()
    fig.savefig(out / "watermark_lag.png", dpi=120)
    plt.close(fig)


def _print_report(console: Console, report: dict[str, Any]) -> None:
    b, d, check = report["baseline"], report["deltamv"], report["check"]
    console.rule("[bold]report")
    console.print(
        f"bank: {report['bank']['transactions']:,} transactions committed, "
        f"{report['bank']['events']:,} change events; money in the bank: {report['true_total']:,}"
    )
    console.print(
        f"deltamv: {d['versions']} versions of total_balance, SUM(balance) in every version: "
        f"{', '.join(f'{t:,}' for t in d['distinct_totals'])}; {d['batches']} batches, "
        f"median batch {d['batch_ms_median'] or 0:.0f} ms, median lag at commit "
        f"{(d['commit_lag_ms_median'] or 0) / 1000:.1f} s"
    )
    if b["samples"]:
        console.print(
            f"baseline: SUM(balance) ranged {b['min']:,} .. {b['max']:,} (worst drift "
            f"{b['max_abs_drift']:,}), wrong in {b['off_fraction']:.0%} of {b['samples']} polls; "
            f"final {b['final']:,} once the log was read to the end"
        )
    for mode, lag in report["lag"].items():
        console.print(
            f"watermark lag, {mode}: median {lag['median_ms'] or 0:.0f} ms, p95 "
            f"{lag['p95_ms'] or 0:.0f} ms, max {lag['max_ms'] or 0:.0f} ms; "
            f"{lag['large_txns']} large transactions held the watermark "
            f"{lag['held_ms_mean'] or 0:.0f} ms on average"
        )
    verdict = "[green]passed[/green]" if check["ok"] else "[red]FAILED[/red]"
    console.print(f"deltamv check: {verdict} ({len(check['violations'])} violations)")
    console.print("plots: sum_balance.png, watermark_lag.png; numbers: report.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deltamv.demo", description=__doc__.split("\n")[0]
    )
    defaults = DemoOptions()
    parser.add_argument("--out", type=Path, default=defaults.out, help="output folder (replaced)")
    parser.add_argument(
        "--duration", type=float, default=defaults.duration, help="seconds of live bank"
    )
    parser.add_argument("--rate", type=float, default=defaults.rate, help="transactions per second")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    opts = DemoOptions(out=args.out, duration=args.duration, rate=args.rate, seed=args.seed)
    report = run_demo(opts)
    return 0 if report["check"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
