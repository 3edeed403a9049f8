"""The README's examples run as tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob
from deltamv.sim import simulate

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(section: str) -> str:
    text = README.read_text()
    body = text[text.index(section) :]
    match = re.search(r"```python\n(.*?)```", body, re.S)
    assert match, f"no python block under {section}"
    return match.group(1)


def test_reading_a_view(spark: Any, tmp_path: Path) -> None:
    run = simulate("bank", tmp_path / "bank", seed=5, txns=150)
    config = load_config(run.config_path)
    ViewJob(config, spark).run(once=True)
    path = config.views["total_balance"].path
    scope: dict[str, Any] = {"path": path, "spark": spark}
    exec(compile(python_block("## Reading a view"), str(README), "exec"), scope)
    latest = delta.read_arrow(path)
    assert scope["table"].to_pylist() == latest.to_pylist()
    assert scope["watermark"] == delta.versions(path)[-1].watermark
    assert scope["rows"] == [tuple(r.values()) for r in latest.to_pylist()]
    assert scope["frame"].to_dicts() == latest.to_pylist()
    assert scope["latest"].collect()[0].asDict() == latest.to_pylist()[0]
    assert scope["info"].watermark == scope["watermark"]
