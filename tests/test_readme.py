"""The README's examples run as tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from deltamv import delta
from deltamv.config import load_config
from deltamv.job import ViewJob
from deltamv.session import delta_spark_available
from deltamv.sim import simulate

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(section: str) -> list[str]:
    """The python blocks of one ``## `` section, in order."""
    text = README.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end != -1 else None]
    blocks = re.findall(r"```python\n(.*?)```", body, re.S)
    assert blocks, f"no python block under {section}"
    return blocks


def test_reading_a_view(spark: Any, tmp_path: Path) -> None:
    run = simulate("bank", tmp_path / "bank", seed=5, txns=150)
    with open(run.config_path, "a") as more:  # and a view with no rows, so no files
        more.write('\n[views.none]\nsql = "SELECT id, owner FROM accounts WHERE balance < -1e18"'
                   '\npath = "out/views/none"\n')  # fmt: skip
    config = load_config(run.config_path)
    ViewJob(config, spark).run(once=True)
    path = config.views["total_balance"].path
    scope: dict[str, Any] = {"path": path, "spark": spark}
    spark_block, other_readers = python_blocks("## Reading a view")
    exec(compile(other_readers, str(README), "exec"), scope)
    latest = delta.read_arrow(path)
    infos = delta.versions(path)
    assert scope["table"].to_pylist() == latest.to_pylist()
    assert scope["rs_watermark"] == infos[-1].watermark
    assert scope["rows"] == [tuple(r.values()) for r in latest.to_pylist()]
    assert scope["frame"].to_dicts() == latest.to_pylist()
    empty: dict[str, Any] = {"path": config.views["none"].path}
    exec(compile(other_readers, str(README), "exec"), empty)
    assert empty["table"].num_rows == 0 and empty["table"].column_names == ["id", "owner"]
    assert empty["rows"] == [] and empty["frame"].height == 0
    if not delta_spark_available(spark):
        pytest.skip("no delta-spark in the session for the Spark block (`make setup`)")
    exec(compile(spark_block, str(README), "exec"), scope)
    assert scope["latest"].collect()[0].asDict() == latest.to_pylist()[0]
    assert scope["watermark"] == infos[-1].watermark
    assert scope["first"].collect()[0].asDict() == delta.read_arrow(path, 0).to_pylist()[0]
    assert_df_equality(scope["at_watermark"], scope["latest"])
    assert scope["info"].version == infos[-1].version
    assert_df_equality(scope["same"], scope["latest"])


@pytest.mark.parametrize("section", ["## A job", "## PostgreSQL as the upstream"])
def test_the_config_examples_load(section: str, tmp_path: Path) -> None:
    """Each TOML block of the README is a config the loader takes as it stands."""
    body = README.read_text().split(section + "\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```toml\n(.*?)```", body, re.S)
    (tmp_path / "job.toml").write_text(block)
    config = load_config(tmp_path / "job.toml")
    assert "total_balance" in config.views
    assert config.views["total_balance"].path == str(tmp_path / "out/bank/views/total_balance")
