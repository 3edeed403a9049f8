"""Reading segment files once: bytes, fingerprints, and the byte-level prescreen.

JSONL segments are read into one shared buffer so that runs of them reach pyarrow's
JSON reader without a copy. The prescreen looks at each one's bytes, right after the
read while they are in the cache, for what pyarrow's reader would forgive or choke on:
invalid UTF-8, blank lines and lines that are not one object, very deep nesting, and
decimal texts it reads differently from Python.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deltamv.changelog._plan import Plan
from deltamv.changelog.segments import Segment

__all__ = ["Loaded", "Screen", "SegmentFingerprint", "load_segments", "prescreen"]

_MAX_DEPTH = 200


@dataclass(frozen=True)
class SegmentFingerprint:
    """What was read of one segment: its size and modification time at the read, and
    the blake2b (16-byte) digest of exactly the bytes that were parsed."""

    path: str
    region: int
    seq: int
    size: int
    mtime_ns: int
    digest: str


@dataclass
class Loaded:
    """One segment as read: its bytes, or the error that stopped the read."""

    index: int
    segment: Segment
    data: bytes | memoryview | None = None
    fingerprint: SegmentFingerprint | None = None
    error: OSError | None = None
    start: int = -1  # where ``data`` sits in the shared JSONL buffer; -1: elsewhere
    end: int = -1  # the end of what the JSON reader sees: data, plus a newline if it lacks one
    screen: Screen | None = None  # the JSONL prescreen's verdict; None: not for the fast path


def load_segments(segments: Sequence[Segment], plan: Plan) -> tuple[bytearray, list[Loaded]]:
    """Read every segment once, fingerprinting the bytes read.

    JSONL segments are read straight into one shared buffer, one after the other (with
    a newline after a file whose last line has none), so that runs of them can be
    parsed without copying; the sizes that buffer is planned with come from a stat
    before the read, and a file whose size changed in between gets its own buffer.
    Each is prescreened right after its read, while its bytes are in the cache.
    """
    planned = [_planned_size(s) for s in segments]
    shared = bytearray(sum(planned) + len(segments))
    view = memoryview(shared)
    offset = 0
    loaded = []
    for i, segment in enumerate(segments):
        item = Loaded(i, segment)
        loaded.append(item)
        try:
            with open(segment.path, "rb") as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                if segment.fmt != "jsonl" or size != planned[i]:
                    item.data = f.read()
                else:
                    got = f.readinto(view[offset : offset + size])
                    tail = f.read(1)
                    if got != size or tail:  # changed while read: not in the shared buffer
                        item.data = bytes(view[offset : offset + got]) + tail + f.read()
                    else:
                        item.data = view[offset : offset + size]
                        item.start, item.end = offset, offset + size
                        if size and shared[offset + size - 1] != 10:
                            shared[offset + size] = 10
                            item.end += 1
                        offset = item.end
                        if plan.fast:
                            item.screen = prescreen(
                                shared,
                                item.start,
                                item.end,
                                decimals=plan.decimals,
                                nulls=plan.foreign,
                            )
        except OSError as e:
            item.error = e
            continue
        digest = hashlib.blake2b(item.data, digest_size=16).hexdigest()
        item.fingerprint = SegmentFingerprint(
            segment.path, segment.region, segment.seq, len(item.data), st.st_mtime_ns, digest
        )
    return shared, loaded


def _planned_size(segment: Segment) -> int:
    if segment.fmt != "jsonl":
        return 0
    try:
        return os.stat(segment.path).st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class Screen:
    """What the prescreen found in a JSONL segment it lets through."""

    newlines: np.ndarray  # positions of its newlines, from its start
    has_null: bool  # the bytes "null" occur in it (see _fast._present_null)


def prescreen(
    shared: bytearray, start: int, end: int, *, decimals: bool, nulls: bool
) -> Screen | None:
    """A segment's newlines (its bytes end with one), when each of its lines looks like
    one JSON object: valid UTF-8, first and last non-blank bytes ``{`` and ``}``, no
    deep nesting, no decimal text pyarrow reads otherwise. None: the reference path."""
    if start == end:
        return Screen(np.zeros(0, np.int64), False)
    view = memoryview(shared)[start:end]
    try:
        codecs.utf_8_decode(view, "strict", True)
    except UnicodeDecodeError:
        return None
    a = np.frombuffer(shared, np.uint8, end - start, start)
    nl = np.flatnonzero(a == 10)
    tight = a[0] == 123 and (a[nl - 1] == 125).all() and (a[nl[:-1] + 1] == 123).all()
    if not tight and not _loose_lines(view):
        return None
    if decimals:
        # pyarrow reads the decimal string "1e+-2" as 0.01; Python's rules refuse it.
        plus = np.flatnonzero(a == 43)
        if len(plus) and (a[plus + 1] == 45).any():
            return None
    # pyarrow crashes the process on JSON nested some 10,000 deep (Python's json stops
    # near 1,000 with RecursionError): a line with more brackets than _MAX_DEPTH goes
    # to the reference path. A line shorter than twice that cannot nest deeper.
    if nl[0] > 2 * _MAX_DEPTH or (len(nl) > 1 and (nl[1:] - nl[:-1]).max() > 2 * _MAX_DEPTH):
        opens = (a == 91) | (a == 123)  # "[" and "{", in strings too: an upper bound
        starts = np.concatenate([np.zeros(1, np.int64), nl[:-1] + 1])
        if (np.add.reduceat(opens, starts, dtype=np.int64) > _MAX_DEPTH).any():
            return None
    has_null = nulls and _NULL.search(shared, start, end) is not None
    return Screen(nl, has_null)


_BAD_START = re.compile(rb"(?:\A|\n)[ \t\r]*(?:[^{ \t\r]|\Z)")
_BAD_END = re.compile(rb"[^} \t\r\n][ \t\r]*\n")
_NULL = re.compile(rb"null")


def _loose_lines(data: memoryview) -> bool:
    """Every line of ``data`` (ending with a newline) starts with ``{`` and ends with
    ``}`` up to JSON whitespace (spaces, tabs, carriage returns)."""
    return _BAD_START.search(data, 0, len(data) - 1) is None and _BAD_END.search(data) is None
