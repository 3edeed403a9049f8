"""Simulator generation speed: events written per second (target: 1M events < 60 s).

Prints a table and writes ``benchmarks/results/sim_speed.json``. Never asserts a time.
Usage: ``python benchmarks/sim_speed.py [--events N]`` (default 1,000,000).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from deltamv.sim import large_txn_summary, simulate

RESULTS = Path(__file__).parent / "results" / "sim_speed.json"
EVENTS_PER_TXN = 7.7  # bank, defaults: measured; only used to size the run


def run(label: str, target_events: int, **kwargs: object) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="deltamv-sim-bench-"))
    try:
        txns = max(1, int(target_events / EVENTS_PER_TXN))
        began = time.perf_counter()
        result = simulate("bank", tmp / "run", txns=txns, **kwargs)  # type: ignore[arg-type]
        seconds = time.perf_counter() - began
        size = sum(p.stat().st_size for p in (tmp / "run").rglob("*") if p.is_file())
        return {
            "case": label,
            "events": result.events,
            "transactions": result.transactions,
            "segments": result.segments,
            "regions": result.regions,
            "seconds": round(seconds, 2),
            "events_per_s": round(result.events / seconds),
            "mb": round(size / 1e6, 1),
            **{f"large_{k}": v for k, v in large_txn_summary(result).items()},
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.events
    cases = [
        run("jsonl, 8 regions, 6 splits, start-ts", n, regions=8, splits=6, accounts=10_000),
        run(
            "jsonl, 8 regions, 6 splits, min-commit-ts",
            n,
            regions=8,
            splits=6,
            accounts=10_000,
            watermark_mode="min-commit-ts",
        ),
        run(
            "parquet, 8 regions",
            n,
            regions=8,
            accounts=10_000,
            format="parquet",
            segment_events=20_000,
        ),
    ]
    header = f"{'case':44} {'events':>9} {'txns':>8} {'seconds':>8} {'events/s':>10} {'MB':>7}"
    print(header)
    print("-" * len(header))
    for c in cases:
        print(
            f"{c['case']:44} {c['events']:>9} {c['transactions']:>8} {c['seconds']:>8} "
            f"{c['events_per_s']:>10} {c['mb']:>7}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"machine": platform.platform(), "python": platform.python_version(), "cases": cases},
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
