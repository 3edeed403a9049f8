from __future__ import annotations

import pyarrow as pa
import pytest

from deltamv.delta import Replace, TableSink, housekeeping, read_arrow

SCHEMA = pa.schema([("k", pa.int64())])


@pytest.mark.parametrize(("hours", "kept"), [(0.5, True), (1 / 3600, True), (0, False)])
def test_vacuum_retention_is_rounded_up_to_whole_hours(tmp_path, hours: float, kept: bool) -> None:
    """A retention under an hour keeps files an hour (it was cut to none: versions
    replaced seconds before lost their files)."""
    path = str(tmp_path / "t")
    sink = TableSink(path, SCHEMA, layout=["k"], app_id="a", metadata={})
    sink.commit(1, Replace(pa.table({"k": [1]}, schema=SCHEMA)), metadata={}, expected_version=None)
    sink.commit(2, Replace(pa.table({"k": [2]}, schema=SCHEMA)), metadata={}, expected_version=0)
    gone = housekeeping.vacuum(path, retention_hours=hours)
    assert (gone == []) is kept
    if kept:
        assert read_arrow(path, 0).column("k").to_pylist() == [1]
    assert read_arrow(path).column("k").to_pylist() == [2]
