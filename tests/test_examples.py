"""Each example's README walk-through, run command by command through ``deltamv.cli``."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from deltamv.cli import main
from deltamv.config import load_config
from deltamv.reader import pick

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def walkthrough(readme: Path) -> list[list[str]]:
    """The ``deltamv ...`` commands of the README's bash block, in order."""
    block = re.search(r"```bash\n(.*?)```", readme.read_text(), re.S)
    assert block, f"{readme} has no bash block"
    commands = [shlex.split(line) for line in block[1].splitlines() if line.startswith("deltamv ")]
    assert commands
    return [c[1:] for c in commands]


@pytest.mark.parametrize("name", ["bank", "orders", "authors"])
def test_example_walkthrough(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:  # fmt: skip
    shutil.copytree(EXAMPLES / name, tmp_path / "examples" / name)
    monkeypatch.chdir(tmp_path)
    commands = walkthrough(EXAMPLES / name / "README.md")
    assert [c[0] for c in commands] == ["simulate", "run", "check", "status", "read", "read"]
    # Small enough for the default test run; the walk-through itself is unchanged.
    commands[0] = [*commands[0][:3], *_with(commands[0][3:], "--txns", "150")]
    for argv in commands:
        assert main(argv) == 0, f"deltamv {' '.join(argv)} failed"
    out = capsys.readouterr().out
    assert "every version of every view is consistent" in out
    assert "held back by" in out
    config = load_config(tmp_path / "examples" / name / f"{name}.toml")
    read = pick(config, list(config.views))
    assert {v.watermark for v in read.versions.values()} == {read.watermark}
    if name == "bank":
        _read_refusals(str(tmp_path / "examples" / name / f"{name}.toml"), tmp_path, capsys)


def _read_refusals(config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``deltamv read`` arguments it cannot honour, and outputs it cannot write: one line
    each (an unwritable --out was a traceback)."""
    (tmp_path / "a-folder").mkdir()
    cases = {
        ("--views", "total_balance,total_balance"): "names total_balance more than once",
        ("--view", "total_balance", "--limit", "-1"): "--limit must be 0 or more",
        ("--view", "total_balance", "--format", "parquet"): "--format parquet needs --out",
        ("--views", "total_balance,balance_by_owner", "--format", "csv"): "needs --out FOLDER",
        ("--view", "total_balance", "--format", "csv", "--out", str(tmp_path / "no" / "x.csv")):
            "--out: cannot write",
        ("--view", "total_balance", "--format", "parquet", "--out", str(tmp_path / "a-folder")):
            "--out: cannot write",
    }  # fmt: skip
    for args, reason in cases.items():
        capsys.readouterr()
        assert main(["read", config, *args]) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("deltamv: error: ") and reason in err[-1], (args, err)
        assert "Traceback" not in "\n".join(err)


def _with(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    args[args.index(flag) + 1] = value
    return args
