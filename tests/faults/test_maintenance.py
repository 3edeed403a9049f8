"""Housekeeping (issue 5): log checkpoints and vacuum keep a long-running job's tables
small without adding versions or breaking the versions within the retention window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deltamv import delta
from deltamv.config import load_config
from deltamv.delta import housekeeping
from deltamv.errors import ConfigError
from deltamv.job import ViewJob
from tests.helpers.bank import CONFIG, commit, lines, put, resolved, segment, totals


def transfer(bank: Path, seq: int, ts: int) -> None:
    """Move 10 from account 1 to account 7 at ``ts``; both regions resolve past it."""
    segment(
        bank,
        1,
        seq,
        lines([put(1, ts, 1, 100 - seq), commit(1, ts, ts + 1, 1), resolved(1, ts + 5)]),
    )
    segment(
        bank,
        2,
        seq,
        lines([put(2, ts, 7, 100 + seq), commit(2, ts, ts + 1, 7), resolved(2, ts + 5)]),
    )


def data_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


def test_checkpoints_and_vacuum_add_no_version_and_keep_the_latest(spark: Any, bank: Path) -> None:
    (bank / "config.toml").write_text(
        CONFIG + '\n[maintenance]\ncheckpoint_interval = 2\nvacuum_retention = "0 hours"\n'
        'vacuum_interval = "0 s"\n'
    )  # fmt: skip
    config = load_config(bank / "config.toml")
    ViewJob(config, spark).run(once=True)
    for i in range(2, 5):
        transfer(bank, i, 100 * i)
        ViewJob(config, spark).run(once=True)
    total = bank / "out" / "views" / "total_balance"
    versions = delta.versions(str(total))
    # Every version is the job's, with a watermark: no VACUUM START/END commits.
    assert [v.watermark for v in versions] == [115, 205, 305, 405]
    assert housekeeping.last_checkpoint(str(total)) == 3
    assert data_files(total) == {Path(u).name for u in delta.file_uris(str(total))}
    assert totals(bank) == (300, 3)
    rich = bank / "out" / "views" / "rich"
    assert data_files(rich) == {Path(u).name for u in delta.file_uris(str(rich))}


def test_default_policy_keeps_old_versions_readable(spark: Any, bank: Path) -> None:
    config = load_config(bank / "config.toml")
    assert config.maintenance.vacuum_retention == 7 * 86400
    ViewJob(config, spark).run(once=True)
    transfer(bank, 2, 200)
    ViewJob(config, spark).run(once=True)
    total = bank / "out" / "views" / "total_balance"
    assert delta.read_arrow(str(total), 0).column("total").to_pylist() == [300]
    # The transfer made account 1 poorer than 100: a new file for "rich", the old one kept.
    rich = bank / "out" / "views" / "rich"
    assert len(data_files(rich)) > len(delta.file_uris(str(rich)))  # version 0 still readable
    assert sorted(delta.read_arrow(str(rich), 0).column("id").to_pylist()) == [1, 2, 7]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[maintenance]\nvacuum_every = "1 hour"\n', "maintenance.vacuum_every"),
        ("[maintenance]\ncheckpoint_interval = -1\n", "maintenance.checkpoint_interval"),
        ('[maintenance]\nvacuum_interval = "soon"\n', "maintenance.vacuum_interval"),
    ],
)
def test_maintenance_config_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    (tmp_path / "config.toml").write_text(CONFIG + "\n" + text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "config.toml")
    assert info.value.key == key


def test_vacuum_retention_off(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG + '\n[maintenance]\nvacuum_retention = "off"\n')
    assert load_config(tmp_path / "config.toml").maintenance.vacuum_retention is None
