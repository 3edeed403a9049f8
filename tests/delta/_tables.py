"""Helpers that read Delta tables the way an outside reader does: the log and the files."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable


def read_version(path: str, version: int | None = None) -> pa.Table:
    """One version's rows: delta-rs' file list, read with pyarrow."""
    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    schema = pa.schema(table.schema().to_arrow())
    uris = table.file_uris()
    if not uris:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(u, schema=schema) for u in uris])


def log(path: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f]


def data_actions(path: str, version: int) -> tuple[list[str], list[str]]:
    """(removed paths, added paths) of one commit."""
    actions = log(path, version)
    removed = [a["remove"]["path"] for a in actions if "remove" in a]
    added = [a["add"]["path"] for a in actions if "add" in a]
    return removed, added


def files_on_disk(path: str) -> set[str]:
    return {n for n in os.listdir(path) if n.endswith(".parquet")}


def files_in_log(path: str) -> set[str]:
    """Every data file any commit of the log ever added."""
    names = set()
    folder = os.path.join(path, "_delta_log")
    for name in os.listdir(folder):
        if name.endswith(".json") and not name.startswith("_"):
            with open(os.path.join(folder, name)) as f:
                for line in f:
                    action = json.loads(line)
                    if "add" in action:
                        names.add(action["add"]["path"])
    return names


def current_files(path: str) -> list[pa.Table]:
    """The latest version's files, each read on its own, in delta-rs' order."""
    table = DeltaTable(path)
    schema = pa.schema(table.schema().to_arrow())
    return [pq.read_table(u, schema=schema) for u in table.file_uris()]


def canonical(value: object) -> object:
    """A hashable value with NaN equal to NaN and -0.0 equal to 0.0."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return value + 0.0
    if isinstance(value, list):
        return tuple(canonical(v) for v in value)
    return value


def bag(table: pa.Table) -> Counter[tuple[object, ...]]:
    """The rows of ``table`` as a multiset of canonical tuples."""
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return Counter(tuple(canonical(v) for v in row) for row in zip(*columns, strict=True))
