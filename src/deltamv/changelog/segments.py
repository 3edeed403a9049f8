"""Finding a change log's segment files (docs/changelog-format.md, "Layout").

``<changelog>/region-<id>/<seq>.jsonl`` (or ``.parquet``). Names starting with ``.``
or ``_`` are writes in progress (or other tooling's files) and are never read.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from deltamv.errors import BadRecordError, ConfigError

__all__ = [
    "RegionScan",
    "Segment",
    "SegmentFormat",
    "SeqRuns",
    "list_region",
    "list_segments",
    "region_dirs",
    "scan_region",
]

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


def _entry_seq(entry: os.DirEntry[str]) -> tuple[int, SegmentFormat] | None:
    """The (seq, format) of a segment entry; None for a hidden one; raises for a bad name."""
    name = entry.name
    if _hidden(name):
        return None
    stem, dot, ext = name.rpartition(".")
    fmt = _SUFFIXES.get(dot + ext)
    seq = _decimal(stem) if fmt else None
    if fmt is None or seq is None or not entry.is_file():
        raise BadRecordError(
            entry.path,
            None,
            "not a segment file: expected <seq>.jsonl or <seq>.parquet with a decimal <seq>",
        )
    return seq, fmt


@dataclass(frozen=True)
class RegionScan:
    """One region directory as :func:`scan_region` saw it."""

    segments: list[Segment]  # the segments after the floor, in seq order
    below: int  # how many visible segments have a seq at or below the floor


def scan_region(
    region: int, region_dir: str, *, after: int = -1, read: Container[int] | None = None
) -> RegionScan:
    """The segments of one region directory with ``seq > after``, in ``seq`` order, and
    the count of those at or below ``after``.

    Every name is checked, but only the segments after the floor are kept: a job that
    has read most of a long change log holds its backlog, not the history. Raises
    BadRecordError for a visible file whose name is not ``<seq>.jsonl`` or
    ``<seq>.parquet``, for two segments after the floor with the same ``seq``, and, given
    ``read``, for a segment at or below the floor whose seq is not in it: one that
    appeared after the region was read past it (segments are appended in seq order).
    """
    segments: list[Segment] = []
    seen: dict[int, str] = {}
    below = 0
    try:
        with os.scandir(region_dir) as entries:
            for entry in entries:
                found = _entry_seq(entry)
                if found is None:
                    continue
                seq, fmt = found
                if seq <= after:
                    if read is not None and seq not in read:
                        raise BadRecordError(
                            entry.path,
                            None,
                            f"segment appeared after region {region} was read up to seq"
                            f" {after} (segments must be appended in seq order)",
                        )
                    below += 1
                    continue
                if seq in seen:
                    raise BadRecordError(
                        entry.path, None, f"segment seq {seq} also used by {seen[seq]}"
                    )
                seen[seq] = entry.path
                segments.append(Segment(region, seq, entry.path, fmt))
    except FileNotFoundError:
        return RegionScan([], 0)  # a region directory removed between two listings
    segments.sort()
    return RegionScan(segments, below)


def list_region(region: int, region_dir: str) -> list[Segment]:
    """All segments of one region directory, in ``seq`` order (see :func:`scan_region`)."""
    return scan_region(region, region_dir).segments


def region_dirs(changelog_dir: str) -> dict[int, str]:
    """The region directories of a change log, by region id, in id order.

    Raises ConfigError (naming ``job.changelog``) when the change-log directory does not
    exist, and BadRecordError (naming the path) for an entry that does not fit the layout.
    """
    try:
        entries = list(os.scandir(changelog_dir))
    except FileNotFoundError:
        raise ConfigError(
            "job.changelog", f"change log directory {changelog_dir} does not exist"
        ) from None
    except NotADirectoryError:
        raise ConfigError(
            "job.changelog", f"change log {changelog_dir} is not a directory"
        ) from None
    regions: dict[int, str] = {}
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
        regions[region] = entry.path
    return dict(sorted(regions.items()))


def list_segments(changelog_dir: str) -> dict[int, list[Segment]]:
    """All visible segments of a change log, per region id, each list in ``seq`` order.

    Raises ConfigError (naming ``job.changelog``) when the change-log directory does not
    exist, and BadRecordError (naming the path) for an entry that does not fit the layout.
    """
    return {r: list_region(r, d) for r, d in region_dirs(changelog_dir).items()}


class SeqRuns:
    """A set of segment seqs kept as runs of consecutive numbers.

    A region's seqs are mostly consecutive, so this takes a few integers per region
    however many segments it has written, where a plain set would grow with the log.
    """

    __slots__ = ("_highs", "_lows")

    def __init__(self, runs: Sequence[tuple[int, int]] = ()) -> None:
        self._lows = [lo for lo, _ in runs]
        self._highs = [hi for _, hi in runs]

    @classmethod
    def of(cls, seqs: Iterable[int]) -> SeqRuns:
        return cls(_merge(sorted((s, s) for s in seqs)))

    def add(self, seqs: Iterable[int]) -> None:
        """Add ``seqs`` in place; cheap when they extend the highest run (new segments)."""
        for seq in sorted(seqs):
            if seq in self:
                continue
            if self._highs and seq == self._highs[-1] + 1:
                self._highs[-1] = seq
            elif not self._highs or seq > self._highs[-1]:
                self._lows.append(seq)
                self._highs.append(seq)
            else:  # a gap filled below the highest run
                runs = _merge(sorted([*zip(self._lows, self._highs, strict=True), (seq, seq)]))
                self._lows, self._highs = [lo for lo, _ in runs], [hi for _, hi in runs]

    def drop_above(self, seq: int) -> None:
        """Remove every seq above ``seq``, in place."""
        i = bisect.bisect_right(self._lows, seq)
        del self._lows[i:], self._highs[i:]
        if self._highs and self._highs[-1] > seq:
            self._highs[-1] = seq

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        i = bisect.bisect_right(self._lows, seq) - 1
        return i >= 0 and seq <= self._highs[i]

    def count_at_most(self, seq: int) -> int:
        """How many seqs are ``<= seq``."""
        return sum(
            min(hi, seq) - lo + 1
            for lo, hi in zip(self._lows, self._highs, strict=True)
            if lo <= seq
        )

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in zip(self._lows, self._highs, strict=True))

    @property
    def runs(self) -> int:
        return len(self._lows)


def _merge(runs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in runs:  # sorted by lo
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged
