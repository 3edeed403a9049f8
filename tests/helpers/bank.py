"""A small hand-made bank: one table of accounts in two regions, and its job config.

The config is rendered from the simulator's bank workload (:func:`deltamv.sim.job_toml`),
so its table and its ``total_balance`` view are spelled in one place. The start
(:func:`write_start`): accounts 1 and 2 in region 1, account 7 in region 2, 100 each;
the first run commits watermark 115. :data:`GOOD_1_2` and :data:`GOOD_2_2` then move 50
from account 1 to account 7 across both regions (watermark 140).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from deltamv import cli, delta
from deltamv.sim import job_toml
from deltamv.sim.workloads import Bank

from . import changelog as log

ACCOUNTS = Bank.tables["accounts"]
TOTAL_BALANCE_SQL = Bank.views["total_balance"]
NEGATIVE_SQL = Bank.views["negative_accounts"]
RICH_SQL = "SELECT id, owner FROM accounts WHERE balance >= 100"

CONFIG = job_toml(
    name="bank", changelog="changelog", checkpoint="state/_checkpoint",
    tables={"accounts": ACCOUNTS}, view_dir="out/views",
    views={"total_balance": TOTAL_BALANCE_SQL, "rich": RICH_SQL},
)  # fmt: skip


def key(id_: int) -> str:
    return f"accounts/{id_:04d}"


def put(region: int, start_ts: int, id_: int, balance: Any) -> log.Event:
    return log.put(region, start_ts, key(id_), {"id": id_, "owner": f"o{id_}", "balance": balance})


def commit(region: int, start_ts: int, commit_ts: int, id_: int) -> log.Event:
    return log.commit(region, start_ts, commit_ts, key(id_))


resolved = log.resolved
lines = log.lines


def segment(root: Path, region: int, seq: int, events: list[log.Event] | str) -> Path:
    """Publish a segment of the bank's change log (``root/changelog``)."""
    return log.write_segment(root / "changelog", region, seq, events)


def write_start(root: Path) -> Path:
    """``root/config.toml`` and the first segment of both regions (see the module doc)."""
    (root / "config.toml").write_text(CONFIG)
    segment(root, 1, 1, [
        log.initialized(1, "", key(5)),
        put(1, 100, 1, 100), put(1, 100, 2, 100), commit(1, 100, 110, 1), resolved(1, 120),
    ])  # fmt: skip
    segment(root, 2, 1, [
        log.initialized(2, key(5), ""),
        put(2, 100, 7, 100), commit(2, 100, 110, 7), resolved(2, 115),
    ])  # fmt: skip
    return root


# A transfer of 50 from account 1 (region 1) to account 7 (region 2): watermark 140 after it.
GOOD_1_2 = lines([put(1, 130, 1, 50), commit(1, 130, 131, 1), resolved(1, 150)])
GOOD_2_2 = lines([put(2, 130, 7, 150), commit(2, 130, 131, 7), resolved(2, 140)])


def run_cli(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str | None]:
    """``deltamv run CONFIG --once`` in this process: exit code and its one error line."""
    capsys.readouterr()
    code = cli.main(["run", str(root / "config.toml"), "--once"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("deltamv: error:")]
    assert len(errors) <= 1, errors
    return code, errors[0] if errors else None


def view_state(root: Path) -> dict[str, list[int | None]]:
    """The watermark of every version of every view (empty if the view has none)."""
    out = {}
    for name in ("total_balance", "rich"):
        path = str(root / "out" / "views" / name)
        exists = delta.table_version(path) is not None
        out[name] = [v.watermark for v in delta.versions(path)] if exists else []
    return out


def totals(root: Path) -> tuple[int, int]:
    table = pq.ParquetDataset(delta.file_uris(str(root / "out" / "views" / "total_balance"))).read()
    return int(table.column("total")[0].as_py()), int(table.column("accounts")[0].as_py())


def rich_ids(root: Path) -> list[int]:
    table = pq.ParquetDataset(delta.file_uris(str(root / "out" / "views" / "rich"))).read()
    return sorted(table.column("id").to_pylist())
