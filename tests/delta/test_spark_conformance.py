"""Conformance with the reference implementation: every version of every Delta table a job
run writes (views, published tables, and whatever the job keeps in its checkpoint) reads
the same in delta-spark as in delta-rs, also behind log checkpoints and after vacuum, and
DESCRIBE HISTORY shows each version's watermark in ``userMetadata``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from chispa import assert_df_equality

from deltamv import delta
from deltamv.config import load_config
from deltamv.delta import housekeeping
from deltamv.delta import spark as spark_delta

from ..job.simrun import SimJob


def delta_tables(*roots: Path) -> list[str]:
    """Every Delta table under ``roots`` (a folder holding ``_delta_log``), sorted."""
    found = {str(log.parent) for root in roots for log in root.rglob("_delta_log")}
    return sorted(found)


def files_exist(path: str, version: int) -> bool:
    return all(
        os.path.exists(unquote(urlparse(u).path) if "://" in u else u)
        for u in delta.file_uris(path, version)
    )


def test_every_version_of_every_table_reads_the_same_in_delta_spark(
    delta_spark: Any, tmp_path: Path
) -> None:
    job = SimJob.create(
        tmp_path, "bank", seed=31, txns=160, splits=1, snapshot_at=0.3,
        segments_per_batch=2, segment_events=50, max_per_round=2,
    )  # fmt: skip
    config_path = job.job_dir / "config.toml"
    text = config_path.read_text()
    # Publish the accounts table too, checkpoint the logs often, vacuum only by hand below.
    text = text.replace(
        "[tables.accounts]\n", '[tables.accounts]\npath = "out/tables/accounts"\n', 1
    )
    text += '\n[maintenance]\ncheckpoint_interval = 3\nvacuum_retention = "off"\n'
    config_path.write_text(text)
    job.config = load_config(config_path)
    rounds = len(job.pending)
    assert rounds >= 4
    step = max(1, -(-rounds // 4))  # four runs
    outputs = [v.path for v in job.config.views.values()]
    outputs += [t.path for t in job.config.tables.values() if t.path]
    vacuumed = False
    while job.pending:
        job.publish(step)
        job.run_once(delta_spark)
        if not vacuumed and all((delta.table_version(p) or 0) >= 1 for p in outputs):
            # Once every output has history: drop the files only older versions need
            # (the latest version's files stay; the job's internal tables keep only
            # their latest version's files anyway).
            for path in outputs:
                housekeeping.vacuum(path, retention_hours=0)
            vacuumed = True

    tables = delta_tables(job.job_dir, Path(job.config.checkpoint))
    names = {Path(t).name for t in tables}
    assert set(job.config.views) | {"accounts"} <= names, names
    compared = gone = behind_checkpoint = 0
    for path in tables:
        infos = delta.versions(path)
        history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
        shown = {h.version: json.loads(h.userMetadata) for h in history}
        checkpointed = housekeeping.last_checkpoint(path)
        for info in infos:
            assert info.watermark is not None, f"{path} version {info.version}"
            assert shown[info.version]["deltamv.watermark"] == str(info.watermark)
            assert shown[info.version]["deltamv.job"] == job.config.name
            if not files_exist(path, info.version):
                # Vacuumed: delta-spark must fail, never return part of the version.
                try:
                    spark_delta.read_version(delta_spark, path, info.version).collect()
                except Exception as e:  # a Java FileNotFound, whatever wraps it
                    assert "not exist" in str(e) or "FileNotFound" in str(e), str(e)[:500]
                else:
                    raise AssertionError(f"{path} version {info.version} read without files")
                gone += 1
                continue
            actual = spark_delta.read_version(delta_spark, path, info.version)
            table = delta.read_arrow(path, info.version)
            expected = delta_spark.createDataFrame(
                table.to_pylist(), delta.arrow_to_spark(table.schema)
            )
            assert_df_equality(actual, expected, ignore_row_order=True)
            compared += 1
            behind_checkpoint += checkpointed is not None and info.version >= checkpointed
    # The run exercised what it claims to: every table, versions read from a log
    # checkpoint, versions whose files vacuum deleted.
    assert compared > len(tables), (compared, len(tables))
    assert behind_checkpoint >= 1, behind_checkpoint
    assert vacuumed and gone >= 1, (vacuumed, gone)
