"""Schemas across the three engines: Arrow (the files), Delta (the log), Spark (the reader).

Only the types a Delta table without column mapping can hold are mapped. Timestamps are
microseconds: Delta's ``timestamp`` is ``timestamp[us, tz=UTC]`` in Arrow and Spark's
``TimestampType``; a zone-less Arrow timestamp is ``timestamp_ntz``.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from deltalake import Schema as DeltaSchema
from pyspark.sql import types as T

from deltamv.errors import DeltaMVError

__all__ = ["arrow_to_spark", "delta_fields", "spark_to_arrow"]


def arrow_to_spark(schema: pa.Schema) -> T.StructType:
    """The Spark ``StructType`` that reads Parquet files written with ``schema``."""
    return T.StructType(
        [T.StructField(f.name, _spark_type(f.type, f.name), f.nullable) for f in schema]
    )


def spark_to_arrow(schema: T.StructType) -> pa.Schema:
    """The Arrow schema deltamv writes a Spark DataFrame of ``schema`` with."""
    return pa.schema(
        [pa.field(f.name, _arrow_type(f.dataType, f.name), f.nullable) for f in schema]
    )


def delta_fields(schema: pa.Schema | DeltaSchema) -> list[dict[str, Any]]:
    """The Delta schema's fields (name, type, nullable), without field metadata.

    Two tables whose ``delta_fields`` are equal store the same columns; this is what a
    commit compares before adding files to an existing table.
    """
    delta = schema if isinstance(schema, DeltaSchema) else DeltaSchema.from_arrow(schema)
    return [_strip_metadata(f) for f in json.loads(delta.to_json())["fields"]]


def _strip_metadata(field: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in field.items() if k != "metadata"}
    if isinstance(out.get("type"), dict) and out["type"].get("type") == "struct":
        out["type"] = {**out["type"], "fields": [_strip_metadata(f) for f in out["type"]["fields"]]}
    return out


_SPARK_SIMPLE: list[tuple[Any, T.DataType]] = [
    (pa.types.is_boolean, T.BooleanType()),
    (pa.types.is_int8, T.ByteType()),
    (pa.types.is_int16, T.ShortType()),
    (pa.types.is_int32, T.IntegerType()),
    (pa.types.is_int64, T.LongType()),
    (pa.types.is_float32, T.FloatType()),
    (pa.types.is_float64, T.DoubleType()),
    (pa.types.is_date32, T.DateType()),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), T.StringType()),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), T.BinaryType()),
]


def _spark_type(t: pa.DataType, name: str) -> T.DataType:
    if pa.types.is_string_view(t):
        return T.StringType()
    for test, spark_type in _SPARK_SIMPLE:
        if test(t):
            return spark_type
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(_spark_type(t.value_type, name), t.value_field.nullable)
    if pa.types.is_map(t):
        return T.MapType(
            _spark_type(t.key_type, name), _spark_type(t.item_type, name), t.item_field.nullable
        )
    if pa.types.is_struct(t):
        return T.StructType(
            [T.StructField(f.name, _spark_type(f.type, f.name), f.nullable) for f in t]
        )
    raise DeltaMVError(f"column {name!r}: Arrow type {t} has no Delta/Spark equivalent")


def _arrow_type(t: T.DataType, name: str) -> pa.DataType:
    simple: dict[type[T.DataType], pa.DataType] = {
        T.BooleanType: pa.bool_(),
        T.ByteType: pa.int8(),
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.DateType: pa.date32(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
        T.TimestampNTZType: pa.timestamp("us"),
    }
    if type(t) in simple:
        return simple[type(t)]
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.ArrayType):
        return pa.list_(pa.field("element", _arrow_type(t.elementType, name), t.containsNull))
    if isinstance(t, T.MapType):
        return pa.map_(
            _arrow_type(t.keyType, name),
            pa.field("value", _arrow_type(t.valueType, name), t.valueContainsNull),
        )
    if isinstance(t, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType, f.name), f.nullable) for f in t])
    raise DeltaMVError(f"column {name!r}: Spark type {t.simpleString()} cannot be stored in Delta")
