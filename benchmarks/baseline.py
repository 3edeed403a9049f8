"""The naive pipeline users would build instead of deltamv, on the same input.

A Spark Structured Streaming query over Spark's own JSON file source (what a Spark user
without deltamv has: ``readStream.json`` over the segment files with an explicit
schema, the row value kept as its JSON text, ``maxFilesPerTrigger`` set to the batch
size deltamv gets) with a ``foreachBatch`` that, per micro-batch:

1. takes every row-carrying event as it arrives: ``PREWRITE`` and ``COMMITTED`` rows (the
   row's new value, or a delete); no matching with ``COMMIT``/``ROLLBACK``, no watermark,
   no transaction grouping, so uncommitted and rolled-back writes are applied too;
2. keeps the last change per key within the batch (a MERGE needs one source row per
   key), parses the JSON value with ``from_json`` into the table's columns;
3. upserts them into one Delta table per source table with delta-rs ``MERGE``
   (``deltalake.DeltaTable.merge``: matched PUT updates, matched DELETE deletes,
   unmatched PUT inserts), the way a delta-rs user without the Delta jar writes;
4. recomputes every view's SQL over those tables and overwrites the view's Delta table
   (``write_deltalake(mode="overwrite")``), so it produces what deltamv produces.

It is what "apply the CDC stream to Delta as it arrives" looks like; its views drift
(``SUM(balance)`` is not constant), which is the consistency deltamv pays for.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from deltamv.config import JobConfig, load_config

# The change log's fields a row-applying pipeline needs (CONTRACT section 2); a field
# declared STRING keeps an object's JSON text, parsed per table below with from_json.
LOG_SCHEMA = (
    "region INT, type STRING, start_ts BIGINT, commit_ts BIGINT, `table` STRING, key STRING,"
    " op STRING, value STRING"
)


class NaivePipeline:
    def __init__(self, spark: SparkSession, config: JobConfig, out: Path) -> None:
        self.spark = spark
        self.config = config
        self.out = out
        self.seconds: dict[str, float] = {"tables (merge)": 0.0, "views (overwrite)": 0.0}
        self.batches = 0

    def table_path(self, name: str) -> str:
        return str(self.out / "tables" / name)

    def run(self) -> None:
        reader = (
            self.spark.readStream.schema(LOG_SCHEMA)
            .option("maxFilesPerTrigger", str(self.config.max_segments_per_batch))
            .json(str(Path(self.config.changelog) / "region-*" / "*.jsonl"))
            .withColumn("file", F.col("_metadata.file_path"))
        )
        query = (
            reader.writeStream.foreachBatch(self.on_batch)
            .option("checkpointLocation", str(self.out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    def on_batch(self, df: DataFrame, batch_id: int) -> None:
        began = time.perf_counter()
        rows = df.where("type IN ('PREWRITE', 'COMMITTED')").select(
            "table", "key", "op", "value", "start_ts", "file"
        )
        rows = rows.persist()
        self.batches += 1
        # The last change per key: a later transaction, else a later segment (a key's
        # region writes its segments in order; names sort by seq).
        latest = Window.partitionBy("key").orderBy(F.col("start_ts").desc(), F.col("file").desc())
        for name, table in self.config.tables.items():
            ddl = table.schema.to_ddl()
            changes = (
                rows.where(F.col("table") == name)
                .withColumn("_n", F.row_number().over(latest))
                .where("_n = 1")
                .select(
                    F.col("key").alias("_key"),
                    "op",
                    F.from_json("value", ddl).alias("v"),
                )
                .select("_key", "op", "v.*")
            )
            data = changes.toArrow()
            if data.num_rows:
                self._upsert(name, data)
        rows.unpersist()
        self.seconds["tables (merge)"] += time.perf_counter() - began
        began = time.perf_counter()
        self._views()
        self.seconds["views (overwrite)"] += time.perf_counter() - began

    def _upsert(self, name: str, data: pa.Table) -> None:
        path = self.table_path(name)
        columns = [c for c in data.column_names if c != "op"]
        try:
            target = DeltaTable(path)
        except Exception:  # no table yet (TableNotFoundError): the first batch creates it
            puts = data.filter(pa.compute.equal(data["op"], "PUT")).select(columns)
            write_deltalake(path, puts, mode="overwrite")
            return
        (
            target.merge(data, predicate="t._key = s._key", source_alias="s", target_alias="t")
            .when_matched_delete(predicate="s.op = 'DELETE'")
            .when_matched_update(updates={c: f"s.{c}" for c in columns}, predicate="s.op = 'PUT'")
            .when_not_matched_insert(
                updates={c: f"s.{c}" for c in columns}, predicate="s.op = 'PUT'"
            )
            .execute()
        )

    def _views(self) -> None:
        for name in self.config.tables:
            path = self.table_path(name)
            if not Path(path, "_delta_log").exists():
                schema = self.config.tables[name].schema.to_ddl()
                self.spark.createDataFrame([], schema).createOrReplaceTempView(name)
                continue
            uris = DeltaTable(path).file_uris()
            self.spark.read.parquet(*uris).createOrReplaceTempView(name)
        for name, view in self.config.views.items():
            data = self.spark.sql(view.sql).toArrow()
            write_deltalake(str(self.out / "views" / name), data, mode="overwrite")


def run_baseline(spark: SparkSession, config_path: Path, out: Path) -> dict[str, Any]:
    """Run the naive pipeline over the config's change log to its end; wall time and phases."""
    config = load_config(config_path)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pipeline = NaivePipeline(spark, config, out)
    began = time.perf_counter()
    began_ms = time.time() * 1000
    pipeline.run()
    return {
        "seconds": round(time.perf_counter() - began, 3),
        "began_ms": began_ms,
        "ended_ms": time.time() * 1000,
        "batches": pipeline.batches,
        "phases": {k: round(v, 3) for k, v in pipeline.seconds.items()},
    }
