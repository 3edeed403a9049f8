"""Views: each view's SQL evaluated over the mirrors at the watermark, then committed.

This is recompute: every view is evaluated in full over its tables at each watermark
that advanced. Correct for any SQL Spark accepts; its cost grows with the tables.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from deltamv.config import JobConfig


def register_tables(
    spark: SparkSession, config: JobConfig, mirrors: Mapping[str, DataFrame]
) -> None:
    """Expose each mirror, without its ``_key``, as a temp view named after its table."""
    for name, table in config.tables.items():
        mirrors[name].select(*[f"`{c}`" for c in table.schema.names]).createOrReplaceTempView(name)


def outputs(spark: SparkSession, config: JobConfig) -> dict[str, tuple[str, DataFrame]]:
    """Every Delta table the job publishes: target name -> (path, DataFrame).

    Views are ``view:<name>``; user-visible table copies (``tables.X.path``) are
    ``table:<name>``, published like a view of ``SELECT * FROM X``.
    """
    out: dict[str, tuple[str, DataFrame]] = {}
    for name, view in config.views.items():
        out[f"view:{name}"] = (view.path, spark.sql(view.sql))
    for name, table in config.tables.items():
        if table.path:
            out[f"table:{name}"] = (table.path, spark.table(name))
    return out


def arrow_schema(df: DataFrame) -> pa.Schema:
    return to_arrow_schema(df.schema)
