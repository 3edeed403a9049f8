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


def test_a_table_under_a_path_delta_rs_percent_encodes(spark, tmp_path) -> None:
    """A space, a '#' or a non-ASCII letter in the path: delta-rs' file_uris() gives
    them percent-encoded (``my%20views``), and every read of the version said its files
    were gone."""
    from deltamv.delta import file_uris, read_spark

    path = str(tmp_path / "my views #1" / "vüe")
    sink = TableSink(path, SCHEMA, layout=["k"], app_id="a", metadata={})
    sink.commit(1, Replace(pa.table({"k": [1]}, schema=SCHEMA)), metadata={}, expected_version=None)
    sink.commit(2, Replace(pa.table({"k": [2]}, schema=SCHEMA)), metadata={}, expected_version=0)

    assert read_arrow(path, 0).column("k").to_pylist() == [1]
    assert all(uri.startswith(path + "/") for uri in file_uris(path))
    files = read_spark(spark, path, 1, engine="files")
    assert [r.k for r in files.collect()] == [2]
    assert [r.k for r in read_spark(spark, path, 0, engine="delta-spark").collect()] == [1]
    gone = housekeeping.vacuum(path, retention_hours=0)
    assert len(gone) == 1 and not gone[0].endswith(file_uris(path)[0].rsplit("/", 1)[1])
    assert read_arrow(path).column("k").to_pylist() == [2]
