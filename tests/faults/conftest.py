"""Small hand-made change logs for the bad-input, config, foreign-writer and storage tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from deltamv import cli, delta

CONFIG = """
[job]
name = "bank"
changelog = "changelog"
checkpoint = "state/_checkpoint"

[tables.accounts]
schema = "id BIGINT, owner STRING, balance BIGINT"
primary_key = ["id"]

[views.total_balance]
sql = "SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts"
path = "out/views/total_balance"

[views.rich]
sql = "SELECT id, owner FROM accounts WHERE balance >= 100"
path = "out/views/rich"
"""


def put(region: int, start_ts: int, id_: int, balance: Any) -> dict[str, Any]:
    return {
        "region": region, "type": "PREWRITE", "start_ts": start_ts, "table": "accounts",
        "key": f"accounts/{id_:04d}", "op": "PUT", "value": {"id": id_, "owner": f"o{id_}", "balance": balance},
    }  # fmt: skip


def commit(region: int, start_ts: int, commit_ts: int, id_: int) -> dict[str, Any]:
    return {
        "region": region, "type": "COMMIT", "start_ts": start_ts, "commit_ts": commit_ts,
        "table": "accounts", "key": f"accounts/{id_:04d}",
    }  # fmt: skip


def resolved(region: int, ts: int) -> dict[str, Any]:
    return {"region": region, "type": "RESOLVED", "ts": ts}


def lines(events: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def segment(root: Path, region: int, seq: int, text: str) -> Path:
    folder = root / "changelog" / f"region-{region}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{seq:06d}.jsonl"
    path.write_text(text)
    return path


# A transfer of 50 from account 1 (region 1) to account 7 (region 2): watermark 140 after it.
GOOD_1_2 = lines([put(1, 130, 1, 50), commit(1, 130, 131, 1), resolved(1, 150)])
GOOD_2_2 = lines([put(2, 130, 7, 150), commit(2, 130, 131, 7), resolved(2, 140)])


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    """Two regions, three accounts of 100 each; the first run commits watermark 115."""
    (tmp_path / "config.toml").write_text(CONFIG)
    segment(tmp_path, 1, 1, lines([
        {"region": 1, "type": "INITIALIZED", "start_key": "", "end_key": "accounts/0005"},
        put(1, 100, 1, 100), put(1, 100, 2, 100), commit(1, 100, 110, 1), resolved(1, 120),
    ]))  # fmt: skip
    segment(tmp_path, 2, 1, lines([
        {"region": 2, "type": "INITIALIZED", "start_key": "accounts/0005", "end_key": ""},
        put(2, 100, 7, 100), commit(2, 100, 110, 7), resolved(2, 115),
    ]))  # fmt: skip
    return tmp_path


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
