"""Incremental maintenance against recompute: the same batches, per view shape.

The input is :mod:`synth`'s bank at N accounts (N/10 transfers in the snapshot), each
batch moving money between ``0.1% of N`` distinct random accounts (``N/2000`` transfers,
so it also inserts that many transfers). For each view shape, one job holds only that
view, run twice over the same log: ``maintain = "incremental"`` and
``maintain = "recompute"`` (the config key), one after the other in the same warm
session. Reported per shape and mode: batch p50 and max (the batches after the first
commit; the first micro-batch reads only the regions' headers), the run's start
(snapshot load, first versions) and what each batch committed.

Shapes: global aggregate (``total_balance``), grouped aggregate (``balance_by_owner``,
1000 owners), join (``transfer_owner``: each transfer with its sender's owner), an
aggregate over the join (``moved_by_owner``), MIN/MAX per owner (``extremes_by_owner``)
COUNT(DISTINCT) per owner (``distinct_by_owner``), and a window function: each sender's
largest transfer (``top_transfer_per_sender``, a row_number per account).
"""

from __future__ import annotations

import os
from typing import Any

from _common import WORK, percentile, say, write_config
from deltamv_run import run_job
from synth import BANK_VIEWS, JOIN_VIEWS, generate

# Views of the shapes below the generated config does not hold (added to the job's).
EXTRA_VIEWS = {
    # MIN/MAX per group: 1000 owners, so at 10M accounts each batch touches nearly every
    # group of 10,000 rows
    "extremes_by_owner": (
        "SELECT owner, MIN(balance) AS low, MAX(balance) AS high, COUNT(*) AS accounts"
        " FROM accounts GROUP BY owner"
    ),
    "distinct_by_owner": (
        "SELECT owner, COUNT(DISTINCT balance) AS balances FROM accounts GROUP BY owner"
    ),
    # MIN/MAX without groups to read again: every value's count kept in order
    "extremes_global": (
        "SELECT MIN(balance) AS low, MAX(balance) AS high, COUNT(*) AS accounts FROM accounts"
    ),
    "extremes_by_bucket": (
        "SELECT id % 1000 AS bucket, MIN(balance) AS low, MAX(balance) AS high"
        " FROM accounts GROUP BY id % 1000"
    ),
    # floating-point values (kept since 2026-11-27; before, per group every touched group
    # was read again, and the global one was a recompute)
    "extremes_double_by_owner": (
        "SELECT owner, MIN(CAST(balance AS DOUBLE)) AS low, MAX(CAST(balance AS DOUBLE)) AS high"
        " FROM accounts GROUP BY owner"
    ),
    "extremes_double_global": (
        "SELECT MIN(CAST(balance AS DOUBLE)) AS low, MAX(CAST(balance AS DOUBLE)) AS high"
        " FROM accounts"
    ),
    # a group key computed by a string function (kept since 2026-11-27 evening; before, a
    # recompute: "expression Substring"): 100 groups of owners
    "balance_by_prefix": (
        "SELECT substring(owner, 7, 3) AS prefix, SUM(balance) AS balance, COUNT(*) AS accounts"
        " FROM accounts GROUP BY substring(owner, 7, 3)"
    ),
    # a group key computed by upper() (kept since 2026-11-28, Spark's case mapping in
    # views/casing.py; before, a recompute: "expression Upper")
    "balance_by_upper_owner": (
        "SELECT upper(owner) AS owner, SUM(balance) AS balance, COUNT(*) AS accounts"
        " FROM accounts GROUP BY upper(owner)"
    ),
    # UNION ALL (kept since 2026-11-28; before, a recompute: "UNION"): every account's
    # and every transfer's amount, and their sums per owner over the union
    "amounts_union": (
        "SELECT 'account' AS kind, id, balance AS amount FROM accounts"
        " UNION ALL SELECT 'transfer', id, amount FROM transfers"
    ),
    "balance_by_owner_union": (
        "SELECT owner, SUM(v) AS total, COUNT(*) AS n FROM (SELECT owner, balance AS v"
        " FROM accounts UNION ALL SELECT a.owner, -t.amount FROM transfers t"
        " JOIN accounts a ON t.from_id = a.id) u GROUP BY owner"
    ),
    # the same with a value per account: as many values' counts as accounts
    "extremes_unique": (
        "SELECT MIN(balance * 100000000 + id) AS low, MAX(balance * 100000000 + id) AS high"
        " FROM accounts"
    ),
    # window functions, recomputed per touched partition (kept since 2026-11-29; before,
    # a recompute: "a window function"): each sender's largest transfer (a partition per
    # account, a few rows each), and the three richest accounts per owner (1000 owners:
    # at 1M accounts a batch touches most partitions of 1,000 rows; ranked by row_number
    # with the id: most accounts hold the initial balance, so a rank() would keep them all)
    "top_transfer_per_sender": (
        "SELECT * FROM (SELECT id, from_id, amount, row_number() OVER (PARTITION BY from_id"
        " ORDER BY amount DESC, id) AS rn FROM transfers) WHERE rn = 1"
    ),
    "richest_per_owner": (
        "SELECT * FROM (SELECT owner, id, balance, row_number() OVER (PARTITION BY owner"
        " ORDER BY balance DESC, id) AS rn FROM accounts) WHERE rn <= 3"
    ),
    # every transfer beside its sender's previous one and the sum of its last three (lag
    # and a moving frame, kept since 2026-11-29 evening; before, a recompute: "the
    # window function Lag")
    "sender_steps": (
        "SELECT id, from_id, amount, lag(amount) OVER (PARTITION BY from_id ORDER BY id)"
        " AS previous, SUM(amount) OVER (PARTITION BY from_id ORDER BY id ROWS BETWEEN 2"
        " PRECEDING AND CURRENT ROW) AS last3 FROM transfers"
    ),
    # outer joins chained on the padded side's column (kept since 2026-11-29, session 52;
    # before, a recompute: "a join whose inputs cannot be looked up by the join key"):
    # every account, each transfer it sent, and the receiver's owner
    "sent_to_owner": (
        "SELECT a.id, t.id AS transfer, r.owner AS receiver FROM accounts a LEFT JOIN"
        " transfers t ON t.from_id = a.id LEFT JOIN accounts r ON r.id = t.to_id"
    ),
    # an EXISTS beside another condition (an existence join, kept since session 52;
    # before, a recompute: "a  join"): rich accounts, or ones that received a transfer
    "rich_or_paid": (
        "SELECT id, owner FROM accounts a WHERE balance > 1000"
        " OR EXISTS (SELECT 1 FROM transfers t WHERE t.to_id = a.id)"
    ),
}
SHAPES = {
    "global aggregate": "total_balance",
    "grouped aggregate": "balance_by_owner",
    "join": "transfer_owner",
    "aggregate over join": "moved_by_owner",
    "MIN/MAX per group": "extremes_by_owner",
    "COUNT(DISTINCT) per group": "distinct_by_owner",
    "global MIN/MAX": "extremes_global",
    "window, latest per key": "top_transfer_per_sender",
}
ALL_VIEWS = {**BANK_VIEWS, **JOIN_VIEWS}


def run_ivm(
    spark: Any,
    accounts: int,
    *,
    batches: int = 6,
    change: float = 0.001,
    shapes: dict[str, str] | None = None,
) -> dict[str, Any]:
    per_batch = max(1, int(accounts * change) // 2)
    data = generate(
        WORK / "synth" / f"ivm-{accounts}",
        accounts=accounts,
        transfers=accounts // 10,
        batches=batches,
        per_batch=per_batch,
        views=ALL_VIEWS,
    )
    rows = []
    for shape, view in (shapes or SHAPES).items():
        runs = {}
        for mode in ("incremental", "recompute"):
            config = write_config(
                data,
                WORK / "ivm" / f"{accounts}-{view}-{mode}",
                snapshot=data / "snapshot",
                max_segments=2,  # one generated batch (a segment per region) per micro-batch
                views=[view],
                extra_views={view: EXTRA_VIEWS[view]} if view in EXTRA_VIEWS else None,
                maintain=mode,
            )
            load = round(os.getloadavg()[0], 1)
            run = run_job(spark, config)
            steady = [r for r in run["reports"] if r["committed"]][1:]
            ms = [r["duration_ms"] for r in steady]
            runs[mode] = {
                "load": load,
                "load_end": round(os.getloadavg()[0], 1),
                "mode": run["modes"].get(view),
                "batches": len(steady),
                "batch_ms_p50": percentile(ms, 50),
                "batch_ms_max": max(ms) if ms else None,
                "start_seconds": run["outside_batches_seconds"],
                "released_per_batch": percentile([r["released"] for r in steady], 50),
                "written_per_batch": {
                    k: percentile([r["written"].get(k, 0) for r in steady], 50)
                    for k in ("rows", "files", "bytes")
                },
                "phase_ms_p50": {
                    k: round(
                        1000 * (percentile([r["phases"].get(k, 0.0) for r in steady], 50) or 0)
                    )
                    for k in ("read", "match", "maintain", "state", "publish", "finish")
                },
                "began_ms": run["began_ms"],
                "ended_ms": run["ended_ms"],
            }
            say(
                f"ivm {accounts} {view} {mode}: batch p50 {runs[mode]['batch_ms_p50']} ms"
                f" (start {run['outside_batches_seconds']} s, load {load})"
            )
        inc, rec = runs["incremental"]["batch_ms_p50"], runs["recompute"]["batch_ms_p50"]
        rows.append({
            "shape": shape, "view": view, "sql": {**ALL_VIEWS, **EXTRA_VIEWS}[view], **runs,
            "speedup": round(rec / inc, 1) if inc and rec else None,
        })  # fmt: skip
    return {
        "accounts": accounts,
        "transfers": accounts // 10,
        "changed_accounts_per_batch": 2 * per_batch,
        "inserted_transfers_per_batch": per_batch,
        "change": change,
        "shapes": rows,
    }
