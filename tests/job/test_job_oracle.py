"""The consistency oracle: every committed version of every view equals the view's SQL
over the simulator's ground truth at that version's watermark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .simrun import SimJob

SCENARIOS = [
    pytest.param("bank", dict(seed=1, txns=300, splits=2), id="bank-start_ts-splits"),
    pytest.param(
        "bank",
        dict(
            seed=2,
            txns=300,
            splits=3,
            watermark_mode="min-commit-ts",
            snapshot_at=0.3,
            duplicate_rate=0.05,
            straggler_rate=0.3,
            orphan_rate=0.02,
        ),
        id="bank-min_commit_ts-snapshot-faults",
    ),
    pytest.param(
        "orders",
        dict(seed=3, txns=300, splits=2, watermark_mode="min-commit-ts", format="mixed"),
        id="orders-min_commit_ts-mixed",
    ),
    pytest.param(
        "authors", dict(seed=4, txns=300, splits=1, snapshot_at=0.5), id="authors-snapshot"
    ),
    # More seeds, rotating workload, mode, topology changes, snapshot and segment format.
    *[
        pytest.param(
            workload,
            dict(
                seed=seed,
                txns=250,
                splits=seed % 4,
                regions=2 + seed % 5,
                watermark_mode=mode,
                snapshot_at=snapshot,
                format=fmt,
                duplicate_rate=0.03,
                straggler_rate=0.2,
                orphan_rate=0.02,
            ),
            id=f"seed{seed}-{workload}-{mode}",
        )
        for seed, workload, mode, snapshot, fmt in [
            (21, "bank", "min-commit-ts", None, "parquet"),
            (22, "orders", "start-ts", 0.6, "jsonl"),
            (23, "authors", "min-commit-ts", None, "mixed"),
            (24, "bank", "start-ts", 0.2, "mixed"),
        ]
    ],
]


@pytest.mark.parametrize(("workload", "sim"), SCENARIOS)
def test_every_version_is_the_view_over_the_truth(
    spark: Any, tmp_path: Path, workload: str, sim: dict[str, Any]
) -> None:
    job = SimJob.create(tmp_path, workload, segments_per_batch=8, segment_events=100, **sim)
    step = 2 if len(job.pending) >= 8 else 1  # at least a few runs, even for short logs
    while job.pending:
        job.publish(step)
        job.run_once(spark)
        job.assert_latest_is_global_watermark()
    checked = job.assert_every_version_matches_truth(spark)
    assert checked >= len(job.config.views)  # every view has versions, all checked


# Window functions, each maintained by the partitions a batch touched: the two richest
# accounts per owner (Spark's WindowGroupLimit under a row_number), and per sender its
# transfers ranked with its total beside them.
WINDOW_VIEWS = {
    "richest": "SELECT * FROM (SELECT owner, id, balance, row_number() OVER (PARTITION BY"
    " owner ORDER BY balance DESC, id) AS rn FROM accounts) WHERE rn <= 2",
    "by_sender": "SELECT id, from_id, amount, rank() OVER (PARTITION BY from_id ORDER BY"
    " amount DESC) AS r, SUM(amount) OVER (PARTITION BY from_id) AS sent FROM transfers",
    "sender_steps": "SELECT id, from_id, lag(amount) OVER (PARTITION BY from_id ORDER BY id)"
    " AS previous, lead(to_id, 1, -1) OVER (PARTITION BY from_id ORDER BY id) AS next_to,"
    " SUM(amount) OVER (PARTITION BY from_id ORDER BY id ROWS BETWEEN 2 PRECEDING AND"
    " CURRENT ROW) AS last3 FROM transfers",
}


@pytest.mark.parametrize(
    "sim",
    [
        pytest.param(dict(seed=31, txns=250, splits=2), id="start_ts-splits"),
        pytest.param(
            dict(
                seed=32,
                txns=250,
                splits=1,
                snapshot_at=0.4,
                duplicate_rate=0.03,
                watermark_mode="min-commit-ts",
                straggler_rate=0.2,
            ),
            id="min_commit_ts-snapshot-faults",
        ),
    ],
)
def test_window_views_are_incremental_and_every_version_is_the_view_over_the_truth(
    spark: Any, tmp_path: Path, sim: dict[str, Any]
) -> None:
    job = SimJob.create(tmp_path, "bank", segments_per_batch=8, segment_events=100,
                        views=WINDOW_VIEWS, accounts=40, **sim)  # fmt: skip
    while job.pending:
        job.publish(2)
        modes = job.run_once(spark)
        assert {v: modes[v] for v in WINDOW_VIEWS} == dict.fromkeys(WINDOW_VIEWS, "incremental")
        job.assert_latest_is_global_watermark()
    checked = job.assert_every_version_matches_truth(spark)
    assert checked >= len(job.config.views)
