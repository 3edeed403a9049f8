"""Plain reading of change-log segments for the simulator's own checkers.

Deliberately independent of :mod:`deltamv.changelog`: the conformance checker and the
reference reader are oracles for the production reader, so they share no code with it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq


@dataclass(frozen=True, order=True)
class SegmentFile:
    """One visible segment file of one region."""

    region: int
    seq: int
    path: str


def _decimal(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def list_changelog(
    changelog_dir: str | os.PathLike[str],
) -> tuple[dict[int, list[SegmentFile]], list[str]]:
    """Visible segments per region (each in seq order) and layout problems found."""
    problems: list[str] = []
    regions: dict[int, list[SegmentFile]] = {}
    root = os.fspath(changelog_dir)
    if not os.path.isdir(root):
        return {}, [f"{root}: change log directory does not exist"]
    for name in sorted(os.listdir(root)):
        if name.startswith((".", "_")):
            continue
        path = os.path.join(root, name)
        rid = _decimal(name[len("region-") :]) if name.startswith("region-") else None
        if rid is None or not os.path.isdir(path):
            problems.append(f"{path}: not a region directory region-<id>")
            continue
        if rid in regions:
            problems.append(f"{path}: region {rid} has two directories")
            continue
        segs: list[SegmentFile] = []
        seen: set[int] = set()
        for fname in sorted(os.listdir(path)):
            if fname.startswith((".", "_")):
                continue
            stem, _, ext = fname.rpartition(".")
            seq = _decimal(stem) if ext in ("jsonl", "parquet") else None
            if seq is None:
                problems.append(f"{path}/{fname}: not a segment name <seq>.jsonl or <seq>.parquet")
                continue
            if seq in seen:
                problems.append(f"{path}/{fname}: segment seq {seq} used twice")
                continue
            seen.add(seq)
            segs.append(SegmentFile(rid, seq, os.path.join(path, fname)))
        regions[rid] = sorted(segs)
    return dict(sorted(regions.items())), problems


def read_segment(path: str) -> list[dict[str, Any] | str]:
    """The events of one segment, in order; a line that is not a JSON object comes back
    as an error string instead of a dict."""
    out: list[dict[str, Any] | str] = []
    if path.endswith(".parquet"):
        for rec in pq.read_table(path).to_pylist():
            event = {k: v for k, v in rec.items() if v is not None}
            for field in ("value", "old_value"):
                if isinstance(event.get(field), str):
                    try:
                        event[field] = json.loads(event[field])
                    except ValueError:
                        out.append(f"field {field!r} is not JSON")
                        break
            else:
                out.append(event)
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                out.append("line is not JSON")
                continue
            out.append(event if isinstance(event, dict) else "line is not a JSON object")
    return out
