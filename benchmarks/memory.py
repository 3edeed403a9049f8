"""Peak RSS of ``deltamv run --once`` (fresh process: driver Python + JVM + Python workers).

Two inputs: one transaction of N rows (a contract-conformant log written here: per
region INITIALIZED, N/regions PREWRITEs, one COMMIT, RESOLVED above it), and a large
backlog (a simulated bank log processed in one go). The job runs with
``spark.driver.memory = 1g``; the RSS of the whole process tree is sampled every 200 ms.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from _common import ATTEMPTS, WORK, log_size, run_cli, say, worker_timeout, write_config

BASE_TS = 470_000_000_000_000_000  # 2023-ish TSO; lag is not measured here


def big_transaction_log(
    out: Path, rows: int, *, regions: int = 4, per_segment: int = 100_000
) -> Path:
    """A change log holding one transaction that inserts ``rows`` accounts."""
    stamp = out / "rows.txt"
    if stamp.exists() and stamp.read_text() == str(rows):
        return out / "changelog"
    # a log of another size may be there: its extra segments would follow the COMMIT
    shutil.rmtree(out / "changelog", ignore_errors=True)
    start_ts, commit_ts = BASE_TS + 1, BASE_TS + 1_000_000
    per_region = -(-rows // regions)
    for r in range(regions):
        first, last = r * per_region, min(rows, (r + 1) * per_region)
        start_key = "" if r == 0 else f"accounts/{first:010d}"
        end_key = "" if r == regions - 1 else f"accounts/{last:010d}"
        region = r + 1
        folder = out / "changelog" / f"region-{region}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(
                {
                    "region": region,
                    "type": "INITIALIZED",
                    "start_key": start_key,
                    "end_key": end_key,
                }
            ),
            json.dumps({"region": region, "type": "RESOLVED", "ts": BASE_TS}),
        ]
        head = f'{{"region":{region},"type":"PREWRITE","start_ts":{start_ts},"table":"accounts","key":"accounts/'
        for i in range(first, last):
            lines.append(
                f'{head}{i:010d}","op":"PUT","value":{{"id":{i},"owner":"owner-{i % 1000:05d}",'
                f'"balance":1000}},"primary":"accounts/0000000000","large":true}}'
            )
        lines.append(
            json.dumps(
                {"region": region, "type": "COMMIT", "start_ts": start_ts, "commit_ts": commit_ts,
                 "table": "accounts", "key": f"accounts/{first:010d}"}
            )
        )  # fmt: skip
        lines.append(json.dumps({"region": region, "type": "RESOLVED", "ts": commit_ts + 1}))
        for seq, at in enumerate(range(0, len(lines), per_segment)):
            (folder / f"{seq:08d}.jsonl").write_text("\n".join(lines[at : at + per_segment]) + "\n")
    stamp.write_text(str(rows))
    return out / "changelog"


def run_memory(name: str, template: Path, changelog: Path, *, timeout: float) -> dict[str, Any]:
    dest = WORK / "memory" / name
    config = write_config(
        template,
        dest,
        changelog=changelog,
        spark_conf={"spark.driver.memory": "1g"},
    )
    log = dest.parent / f"{name}.log"
    for attempt in range(ATTEMPTS):
        # a run that failed only because Spark's Python worker did not connect back in
        # 10 s (a loaded machine) is run again from scratch; ``retries`` records it
        if attempt:
            say(f"memory {name}: Python worker did not connect back in 10 s; again")
            config = write_config(
                template, dest, changelog=changelog, spark_conf={"spark.driver.memory": "1g"}
            )
        load = round(os.getloadavg()[0], 1)
        code, rss, seconds = run_cli(
            ["run", str(config), "--once"], cwd=dest, log=log, timeout=timeout
        )
        if code == 0 or not worker_timeout(log.read_text()):
            break
    tail = log.read_text().strip().splitlines()[-3:]
    result = {
        "case": name,
        **log_size(changelog),
        "exit_code": code,
        "retries": attempt,
        "load": load,
        "load_end": round(os.getloadavg()[0], 1),
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(rss.peak / 2**20),
        "peak_parts_mb": {k: round(v / 2**20) for k, v in rss.peak_parts.items()},
        "log_tail": tail,
        "rss_samples_mb": [(round(t, 1), round(v / 2**20)) for t, v in rss.samples[::5]],
    }
    say(
        f"memory {name}: exit {code}, peak RSS {result['peak_rss_mb']} MB in {seconds:.0f} s"
        f" (load {load})"
    )
    return result
