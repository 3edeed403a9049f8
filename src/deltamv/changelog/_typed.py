"""Vectorised twins of ``format``'s column checks: parsed JSON values to typed columns.

pyarrow's JSON reader parses each declared column into a *parse type*
(:func:`parse_type`): every integer kind as int64, FLOAT and DOUBLE as float64, DECIMAL
as decimal128(38, scale), BOOLEAN as bool, and STRING, DATE, TIMESTAMP and BINARY as
string. The reader already refuses the wrong JSON kinds (a string where a number is
declared, a fraction or an out-of-range number where an integer is, a decimal that
would need rounding). :func:`check_column` does the rest of what ``format``'s checker
for that column does, one array at a time, and says for each row one of three things:

- the value is what the reference path would accept, typed as it would type it;
- the value is *bad*: the reference path rejects it;
- the value is *undecided*: this module cannot tell cheaply (a timestamp in an ISO form
  outside the common subset, a NaN, a negative zero, a DATE that pyarrow cannot cast).
  The caller then asks the reference path, which is the definition of right.

Nothing here may say "accepted" where the reference path would reject or type the
value differently; where in doubt it says undecided.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.schema import INTEGER_RANGES, Column

__all__ = ["Checked", "check_column", "parse_type"]

_FLOAT32_MAX = 3.4028234663852886e38

# The ISO-8601 forms taken on the fast path, a subset of what Python's
# datetime.fromisoformat (3.11+) accepts and pyarrow casts to the same instant. Years
# 0001 and 9999 are left to the reference path: an offset can move them out of range.
_YEAR = r"(?:000[2-9]|00[1-9]\d|0[1-9]\d\d|[1-8]\d{3}|9[0-8]\d\d|99[0-8]\d|999[0-8])"
_DATE = r"(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?"
_ZONE = r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_TIMESTAMP_RE = rf"^{_YEAR}-{_DATE}(?:[T ]{_TIME}{_ZONE}?)?$"
_DATE_RE = r"^(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})-\d\d-\d\d$"

# base64 digit values; 64 marks the pad "=", 255 anything else.
_B64 = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"):
    _B64[_c] = _i
_B64[ord("=")] = 64


def parse_type(col: Column, scale: int | None = None) -> pa.DataType:
    """The type pyarrow's JSON reader parses ``col`` into (see the module docstring).

    ``scale``: a DECIMAL's parse scale when several tables share the column name with
    different scales (the largest); defaults to the column's own.
    """
    kind = col.kind
    if kind in INTEGER_RANGES:
        return pa.int64()
    if kind in ("float", "double"):
        return pa.float64()
    if kind == "decimal":
        return pa.decimal128(38, col.scale if scale is None else scale)
    if kind == "boolean":
        return pa.bool_()
    return pa.string()


@dataclass(frozen=True)
class Checked:
    """One column checked: typed values (null where bad or undecided) and the verdicts."""

    values: pa.Array  # col.arrow_type()
    bad: np.ndarray  # bool per row: present, and the reference path rejects it
    undecided: np.ndarray  # bool per row: present, and only the reference path can tell


def check_column(arr: pa.Array, col: Column) -> Checked:
    """Check and type one parsed column (``arr`` in a parse type) as ``col`` declares it.

    Nulls stay null and are neither bad nor undecided (NOT NULL is the caller's).
    """
    n = len(arr)
    no = np.zeros(n, dtype=bool)
    target = col.arrow_type()
    if arr.null_count == n:
        return Checked(pa.nulls(n, target), no, no)
    kind = col.kind
    if kind in INTEGER_RANGES:
        if kind == "bigint":
            return Checked(arr, no, no)
        lo, hi = INTEGER_RANGES[kind]
        bad = _np_mask(pc.or_(pc.less(arr, lo), pc.greater(arr, hi)))
        return Checked(_nulled(arr, bad).cast(target), bad, no)
    if kind in ("float", "double"):
        x = arr.to_numpy(zero_copy_only=False)  # nulls come out as NaN
        valid = _np_valid(arr)
        with np.errstate(invalid="ignore"):
            # NaN and infinities are not JSON (the reference path says so); -0.0 may
            # have been the integer -0, which the reference path turns into +0.0.
            undecided = valid & (~np.isfinite(x) | ((x == 0) & np.signbit(x)))
            bad = valid & ~undecided & (np.abs(x) > _FLOAT32_MAX) if kind == "float" else no
        out = _nulled(arr, bad | undecided)
        return Checked(out.cast(target, safe=False) if kind == "float" else out, bad, undecided)
    if kind == "decimal":
        return _check_decimal(arr, col)
    if kind in ("string", "boolean"):
        return Checked(arr, no, no)
    if kind == "date":
        undecided = _np_valid(arr) & ~_np_mask(pc.match_substring_regex(arr, _DATE_RE))
        return _cast_or_undecided(_nulled(arr, undecided), target, undecided)
    if kind == "timestamp":
        undecided = _np_valid(arr) & ~_np_mask(pc.match_substring_regex(arr, _TIMESTAMP_RE))
        text = _nulled(arr, undecided)
        # To one form pyarrow casts: a date alone is midnight, a space may stand for
        # "T", and no offset means UTC (as the reference path reads them).
        text = pc.replace_substring_regex(
            text, r"^(\d{4}-\d\d-\d\d)$", r"\1T00:00:00+00:00", max_replacements=1
        )
        text = pc.replace_substring_regex(text, r"^(\d{4}-\d\d-\d\d) ", r"\1T")
        text = pc.replace_substring_regex(
            text, r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)$", r"\1+00:00"
        )
        return _cast_or_undecided(text, target, undecided)
    if kind == "binary":
        return _check_base64(arr)
    raise AssertionError(f"unhandled column kind {kind}")


def _check_decimal(arr: pa.Array, col: Column) -> Checked:
    n = len(arr)
    no = np.zeros(n, dtype=bool)
    undecided = no
    scale = col.scale
    if arr.type.scale != scale:
        # Parsed at a larger scale (another table's column of the same name). A value
        # that needs rounding is left to the reference path, which refuses it.
        narrow = arr.cast(pa.decimal128(38, scale), safe=False)
        exact = pc.equal(narrow.cast(arr.type), arr)
        undecided = _np_valid(arr) & ~_np_mask(exact)
        arr = _nulled(narrow, undecided)
    # pyarrow checks the scale but not the precision of decimals given as strings (and
    # 128 bits hold some 39-digit numbers, hence decimal256 for the widest columns).
    limit = Decimal(10) ** (col.precision - scale)
    if col.precision < 38:
        bad = _np_mask(pc.greater_equal(pc.abs(arr), pa.scalar(limit, pa.decimal128(38, scale))))
    else:
        wide = pc.abs(arr.cast(pa.decimal256(76, scale)))
        bad = _np_mask(pc.greater_equal(wide, pa.scalar(limit, pa.decimal256(76, scale))))
    return Checked(_nulled(arr, bad).cast(col.arrow_type()), bad, undecided)


def _cast_or_undecided(text: pa.Array, target: pa.DataType, undecided: np.ndarray) -> Checked:
    no = np.zeros(len(text), dtype=bool)
    try:
        return Checked(text.cast(target), no, undecided)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        # Some value the strict pattern let through does not exist (February 30th):
        # the reference path names it.
        everything = _np_valid(text) | undecided
        return Checked(pa.nulls(len(text), target), no, everything)


def _check_base64(arr: pa.Array) -> Checked:
    """Decode base64 text exactly as ``base64.b64decode(text, validate=True)`` accepts it:
    length a multiple of 4, only alphabet digits, at most two "=" and only at the end.
    Anything else is undecided (the reference path says which error)."""
    n = len(arr)
    valid = _np_valid(arr)
    offsets, data = _string_buffers(arr)  # null slots may hold bytes: masked by `valid`
    lens = np.diff(offsets)
    digits = _B64[data]
    owner = np.repeat(np.arange(n), lens)
    pads = _pads(offsets, data)
    ok = (lens % 4 == 0) & (np.bincount(owner[digits == 64], minlength=n) == pads)
    ok &= np.bincount(owner[digits == 255], minlength=n) == 0
    undecided = valid & ~ok
    good = np.flatnonzero(valid & ok)
    no = np.zeros(n, dtype=bool)
    if not len(good):
        return Checked(pa.nulls(n, pa.binary()), no, undecided)
    compact = arr if len(good) == n else arr.take(pa.array(good))
    offsets, data = _string_buffers(compact)
    lens, pads = np.diff(offsets), pads[good]
    quads = _B64[data].reshape(-1, 4)
    quads[quads == 64] = 0
    out = np.empty((len(quads), 3), np.uint8)
    out[:, 0] = (quads[:, 0] << 2) | (quads[:, 1] >> 4)
    out[:, 1] = ((quads[:, 1] & 15) << 4) | (quads[:, 2] >> 2)
    out[:, 2] = ((quads[:, 2] & 3) << 6) | quads[:, 3]
    flat = out.reshape(-1)
    if pads.any():
        # Drop the bytes the padding stands for, at the end of each value.
        full_ends = np.cumsum(lens // 4 * 3)
        keep = np.ones(len(flat), dtype=bool)
        keep[(full_ends - 1)[pads >= 1]] = False
        keep[(full_ends - 2)[pads >= 2]] = False
        flat = flat[keep]
    new_offsets = np.zeros(len(good) + 1, np.int32)
    np.cumsum(lens // 4 * 3 - pads, out=new_offsets[1:])
    decoded = pa.Array.from_buffers(
        pa.binary(), len(good), [None, pa.py_buffer(new_offsets), pa.py_buffer(flat.tobytes())]
    )
    if len(good) == n:
        return Checked(decoded, no, undecided)
    where = np.full(n, -1, np.int64)
    where[good] = np.arange(len(good))
    return Checked(decoded.take(pa.array(where, mask=where < 0)), no, undecided)


def _pads(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """How many "=" end each value (0, 1 or 2)."""
    n = len(offsets) - 1
    if not len(data):
        return np.zeros(n, np.int64)
    lens, ends = np.diff(offsets), offsets[1:]
    pad1 = (lens >= 1) & (data[np.maximum(ends - 1, 0)] == ord("="))
    pad2 = pad1 & (lens >= 2) & (data[np.maximum(ends - 2, 0)] == ord("="))
    return pad1.astype(np.int64) + pad2


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The value offsets (rebased to 0) and the bytes they cover, of a string array."""
    n = len(arr)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[arr.offset : arr.offset + n + 1].astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(buffers[2], np.uint8)[start:end]
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    return offsets - start, data


def _np_valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _np_mask(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean array as numpy, null as False."""
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def _nulled(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    """``arr`` with the rows in ``mask`` set to null."""
    if not mask.any():
        return arr
    return pc.if_else(pa.array(~mask), arr, pa.scalar(None, arr.type))
