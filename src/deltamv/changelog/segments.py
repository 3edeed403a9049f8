"""Finding a change log's segment files (CONTRACT.md section 2).

``<changelog>/region-<id>/<seq>.jsonl`` (or ``.parquet``). Names starting with ``.``
or ``_`` are writes in progress (or other tooling's files) and are never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from deltamv.errors import BadRecordError, DeltaMVError

SegmentFormat = Literal["jsonl", "parquet"]

_REGION_PREFIX = "region-"
_SUFFIXES: dict[str, SegmentFormat] = {".jsonl": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True, order=True)
class Segment:
    """One immutable segment file of one region's stream."""

    region: int
    seq: int
    path: str
    fmt: SegmentFormat


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _decimal(text: str) -> int | None:
    # str.isdigit accepts non-ASCII digits ("²"); the contract means ASCII decimals.
    return int(text) if text.isascii() and text.isdigit() else None


def list_region(region: int, region_dir: str) -> list[Segment]:
    """The segments of one region directory, in ``seq`` order.

    Raises BadRecordError for a visible file whose name is not ``<seq>.jsonl`` or
    ``<seq>.parquet``, and for two segments with the same ``seq``.
    """
    segments: list[Segment] = []
    seen: dict[int, str] = {}
    try:
        entries = list(os.scandir(region_dir))
    except FileNotFoundError:
        return []  # a region directory removed between two listings: nothing to read
    for entry in entries:
        name = entry.name
        if _hidden(name):
            continue
        stem, dot, ext = name.rpartition(".")
        fmt = _SUFFIXES.get(dot + ext)
        seq = _decimal(stem) if fmt else None
        if fmt is None or seq is None or not entry.is_file():
            raise BadRecordError(
                entry.path,
                None,
                "not a segment file: expected <seq>.jsonl or <seq>.parquet with a decimal <seq>",
            )
        if seq in seen:
            raise BadRecordError(entry.path, None, f"segment seq {seq} also used by {seen[seq]}")
        seen[seq] = entry.path
        segments.append(Segment(region, seq, entry.path, fmt))
    segments.sort()
    return segments


def list_segments(changelog_dir: str) -> dict[int, list[Segment]]:
    """All visible segments of a change log, per region id, each list in ``seq`` order.

    Raises DeltaMVError when the change-log directory does not exist, and
    BadRecordError (naming the path) for an entry that does not fit the layout.
    """
    try:
        entries = list(os.scandir(changelog_dir))
    except FileNotFoundError:
        raise DeltaMVError(f"change log directory {changelog_dir} does not exist") from None
    except NotADirectoryError:
        raise DeltaMVError(f"change log {changelog_dir} is not a directory") from None
    regions: dict[int, list[Segment]] = {}
    for entry in entries:
        name = entry.name
        if _hidden(name):
            continue
        region = _decimal(name[len(_REGION_PREFIX) :]) if name.startswith(_REGION_PREFIX) else None
        if region is None or not entry.is_dir():
            raise BadRecordError(
                entry.path, None, "not a region directory: expected region-<id> with a decimal <id>"
            )
        if region in regions:
            raise BadRecordError(entry.path, None, f"region {region} has two directories")
        regions[region] = list_region(region, entry.path)
    return dict(sorted(regions.items()))
