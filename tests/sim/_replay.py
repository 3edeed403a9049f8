from __future__ import annotations

import random
from pathlib import Path

from deltamv.sim import Truth
from deltamv.sim._io import list_changelog
from deltamv.sim.reference import ReferenceReader, rounds


def replay_in_rounds(run: Path, seed: int, *, use_snapshot: bool = True) -> tuple[int, int]:
    """Feed a run's log round by round, regions unevenly; at every round the reader's
    state at its global watermark must equal the truth there. Returns (rounds, watermark)."""
    truth = Truth.load(run)
    reader = ReferenceReader.for_run(run, use_snapshot=use_snapshot)
    segments, problems = list_changelog(run / "changelog")
    assert not problems
    previous, n = 0, 0
    for batch in rounds(segments, random.Random(seed)):
        for region, seg in batch:
            reader.feed_segment(region, seg.path)
        watermark = reader.global_watermark()
        assert watermark >= previous
        previous = watermark
        got, expected = reader.tables_at_watermark(), truth.tables_at(watermark)
        for name, table in expected.items():
            assert got[name].equals(table), f"round {n}: table {name} differs at {watermark}"
        n += 1
    return n, previous
