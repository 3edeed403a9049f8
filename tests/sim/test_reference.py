"""The reference reader reproduces the truth at every round's global watermark, for any
seed and parameters, whatever order the regions' segments are published in."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltamv.sim import WATERMARK_MODES, WORKLOADS, simulate
from deltamv.sim.conformance import check_changelog

from ._replay import replay_in_rounds

runs = st.fixed_dictionaries(
    {
        "workload": st.sampled_from(WORKLOADS),
        "seed": st.integers(0, 10_000),
        "txns": st.integers(30, 250),
        "regions": st.integers(1, 6),
        "splits": st.integers(0, 6),
        "watermark_mode": st.sampled_from(WATERMARK_MODES),
        "snapshot_at": st.none() | st.floats(0, 1),
        "large_every": st.sampled_from([0, 20, 60]),
        "large_size": st.integers(2, 30),
        "large_prewrite_ms": st.integers(0, 80),
        "duplicate_rate": st.sampled_from([0.0, 0.05, 0.3]),
        "straggler_rate": st.sampled_from([0.0, 0.1, 0.5]),
        "orphan_rate": st.sampled_from([0.0, 0.02, 0.1]),
        "segment_events": st.integers(5, 80),
        "format": st.sampled_from(["jsonl", "parquet", "mixed"]),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(params=runs, order_seed=st.integers(0, 1000))
def test_reference_reader_matches_truth_round_by_round(params: dict, order_seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        result = simulate(out=run, **params)
        assert check_changelog(result.changelog, truth=run) == []
        _rounds, watermark = replay_in_rounds(run, order_seed)
        assert watermark == result.final_watermark
        if params["snapshot_at"] is not None:  # also the log alone, from the beginning
            _rounds, watermark = replay_in_rounds(run, order_seed + 1, use_snapshot=False)
            assert watermark == result.final_watermark


def test_a_split_region_does_not_count_before_its_parent_is_read(tmp_path: Path) -> None:
    from deltamv.sim._io import list_changelog
    from deltamv.sim.reference import ReferenceReader

    result = simulate("bank", tmp_path / "run", seed=2, txns=300, regions=1, splits=1)
    segments, _ = list_changelog(result.changelog)
    assert sorted(segments) == [1, 2, 3]
    reader = ReferenceReader.for_run(result.out)
    for region in (2, 3):  # the successors first: their RESOLVED must not count yet
        for seg in segments[region]:
            reader.feed_segment(region, seg.path)
    assert reader.global_watermark() == 0
    for seg in segments[1]:
        reader.feed_segment(1, seg.path)
    assert reader.global_watermark() == result.final_watermark
