"""Spark's ``upper``, ``lower`` and ``initcap`` of strings, for the DuckDB side of
maintenance.

Spark maps case with ICU in the root locale (``spark.sql.icu.caseMappings.enabled``,
true by default): full mappings (``'ß'`` to ``'SS'``, ``'ﬁ'`` to ``'FI'``, ``'İ'`` to
``'i̇'``) and, for ``lower``, a capital sigma that ends a word becomes ``'ς'``. DuckDB's
``upper``/``lower`` map one character to one and know no final sigma, so they are not
used. Python's ``str.upper``/``str.lower`` follow the same Unicode rules as ICU, of an
older Unicode version (Python 3.11's 14.0 against Spark 4.2's ICU), so they agree but
for the characters the later versions gave a case or a case property: those are the
tables below, taken from Spark itself over every code point
(``tests/views/test_casing.py`` checks them again, and would fail on a Spark whose ICU
maps otherwise).

- ``upper`` maps each character alone: Python's mapping, but for ``_UPPER``.
- ``lower`` maps each character alone too, but a capital sigma: ``'ς'`` where it
  follows a cased character and no cased character follows it (case-ignorable ones, as
  accents, skipped on both sides), else ``'σ'``. Python applies that rule with its own
  properties; a string holding a character of ``_LOWER`` or ``_SIGMA`` takes the rule
  here, with Spark's properties for those.
- ``initcap`` title-cases the first character of each word (words are apart by spaces,
  U+0020, alone: ``'a-b c_d'`` becomes ``'A-b C_d'``) as it stands (``'İ'`` stays) and
  lower-cases the others as ``lower`` does in the whole string; a character of
  ``_UPPER`` title-cases as it upper-cases.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["spark_initcap", "spark_lower", "spark_upper"]

# (first, last, offset): each code point in first..last maps to itself + offset, where
# Spark's mapping is not Python's.
_UPPER_RANGES = [
    (0x19B, 0x19B, 42561), (0x264, 0x264, 42343), (0x1C8A, 0x1C8A, -1),
    (0xA7CD, 0xA7CD, -1), (0xA7CF, 0xA7CF, -1), (0xA7D3, 0xA7D3, -1), (0xA7D5, 0xA7D5, -1),
    (0xA7DB, 0xA7DB, -1), (0x10D70, 0x10D85, -32), (0x16EBB, 0x16ED3, -27),
]  # fmt: skip
_LOWER_RANGES = [
    (0x1C89, 0x1C89, 1), (0xA7CB, 0xA7CB, -42343), (0xA7CC, 0xA7CC, 1), (0xA7CE, 0xA7CE, 1),
    (0xA7D2, 0xA7D2, 1), (0xA7D4, 0xA7D4, 1), (0xA7DA, 0xA7DA, 1), (0xA7DC, 0xA7DC, -42561),
    (0x10D50, 0x10D65, 32), (0x16EA0, 0x16EB8, 27),
]  # fmt: skip

# What the final-sigma rule sees of a character: cased (and not case-ignorable),
# case-ignorable, or neither.
_CASED, _IGNORABLE, _NEITHER = "cased", "ignorable", "neither"
# (first, last, property) where Spark's property is not Python's.
_SIGMA_RANGES = [
    (0x295, 0x295, _NEITHER), (0x897, 0x897, _IGNORABLE), (0xECE, 0xECE, _IGNORABLE),
    (0x1ACF, 0x1ADD, _IGNORABLE), (0x1AE0, 0x1AEB, _IGNORABLE), (0x1C89, 0x1C8A, _CASED),
    (0xA7CB, 0xA7CF, _CASED), (0xA7D2, 0xA7D2, _CASED), (0xA7D4, 0xA7D4, _CASED),
    (0xA7DA, 0xA7DC, _CASED), (0xA7F1, 0xA7F1, _IGNORABLE), (0x10D4E, 0x10D4E, _IGNORABLE),
    (0x10D50, 0x10D65, _CASED), (0x10D69, 0x10D6D, _IGNORABLE), (0x10D6F, 0x10D6F, _IGNORABLE),
    (0x10D70, 0x10D85, _CASED), (0x10EC5, 0x10EC5, _IGNORABLE), (0x10EFA, 0x10EFF, _IGNORABLE),
    (0x11241, 0x11241, _IGNORABLE), (0x113BB, 0x113C0, _IGNORABLE),
    (0x113CE, 0x113CE, _IGNORABLE), (0x113D0, 0x113D0, _IGNORABLE),
    (0x113D2, 0x113D2, _IGNORABLE), (0x113E1, 0x113E2, _IGNORABLE),
    (0x1171E, 0x1171E, _NEITHER), (0x11B60, 0x11B60, _IGNORABLE),
    (0x11B62, 0x11B64, _IGNORABLE), (0x11B66, 0x11B66, _IGNORABLE),
    (0x11DD9, 0x11DD9, _IGNORABLE), (0x11F00, 0x11F01, _IGNORABLE),
    (0x11F36, 0x11F3A, _IGNORABLE), (0x11F40, 0x11F40, _IGNORABLE),
    (0x11F42, 0x11F42, _IGNORABLE), (0x11F5A, 0x11F5A, _IGNORABLE),
    (0x13439, 0x13440, _IGNORABLE), (0x13447, 0x13455, _IGNORABLE),
    (0x1611E, 0x16129, _IGNORABLE), (0x1612D, 0x1612F, _IGNORABLE),
    (0x16D40, 0x16D42, _IGNORABLE), (0x16D6B, 0x16D6C, _IGNORABLE),
    (0x16EA0, 0x16EB8, _CASED), (0x16EBB, 0x16ED3, _CASED), (0x16FF2, 0x16FF3, _IGNORABLE),
    (0x1DF25, 0x1DF2A, _CASED), (0x1E030, 0x1E06D, _IGNORABLE),
    (0x1E08F, 0x1E08F, _IGNORABLE), (0x1E4EB, 0x1E4EF, _IGNORABLE),
    (0x1E5EE, 0x1E5EF, _IGNORABLE), (0x1E6E3, 0x1E6E3, _IGNORABLE),
    (0x1E6E6, 0x1E6E6, _IGNORABLE), (0x1E6EE, 0x1E6EF, _IGNORABLE),
    (0x1E6F5, 0x1E6F5, _IGNORABLE), (0x1E6FF, 0x1E6FF, _IGNORABLE),
]  # fmt: skip


def _expand(ranges: list[tuple[int, int, int]]) -> dict[str, str]:
    return {chr(c): chr(c + offset) for first, last, offset in ranges
            for c in range(first, last + 1)}  # fmt: skip


_UPPER = _expand(_UPPER_RANGES)
_LOWER = _expand(_LOWER_RANGES)
_SIGMA = {chr(c): p for first, last, p in _SIGMA_RANGES for c in range(first, last + 1)}
_UPPER_KEYS = frozenset(_UPPER)
_LOWER_RULE = frozenset(_LOWER) | frozenset(_SIGMA)  # strings with these: the rule here
_CAPITAL_SIGMA = "\u03a3"


@functools.lru_cache(maxsize=4096)
def _python_property(c: str) -> str:
    """What Python's final-sigma rule sees of ``c`` (tried on it, as the tables were)."""
    if (c + _CAPITAL_SIGMA).lower()[-1] == "ς":
        return _CASED
    return _IGNORABLE if ("A" + c + _CAPITAL_SIGMA).lower()[-1] == "ς" else _NEITHER


def _property(c: str) -> str:
    return _SIGMA.get(c) or _python_property(c)


def _cased_beside(s: str, i: int, step: int) -> bool:
    """Whether the first character from ``i + step`` on (by ``step``) that is not
    case-ignorable is cased."""
    i += step
    while 0 <= i < len(s):
        p = _property(s[i])
        if p != _IGNORABLE:
            return p == _CASED
        i += step
    return False


def _upper_one(s: str) -> str:
    if s.isascii() or _UPPER_KEYS.isdisjoint(s):
        return s.upper()
    return "".join(_UPPER.get(c) or c.upper() for c in s)


def _lowered(s: str, i: int) -> str:
    """Spark's lower case of ``s[i]`` in ``s``: a capital sigma by the final-sigma rule."""
    c = s[i]
    if c == _CAPITAL_SIGMA:
        return "ς" if _cased_beside(s, i, -1) and not _cased_beside(s, i, 1) else "σ"
    return _LOWER.get(c) or c.lower()


def _lower_one(s: str) -> str:
    if s.isascii() or _LOWER_RULE.isdisjoint(s):
        return s.lower()
    return "".join(_lowered(s, i) for i in range(len(s)))


def _initcap_one(s: str) -> str:
    if s.isascii():
        return " ".join(word[:1].upper() + word[1:].lower() for word in s.split(" "))
    out = []
    start = True
    for i, c in enumerate(s):
        out.append((_UPPER.get(c) or c.title()) if start else _lowered(s, i))
        start = c == " "
    return "".join(out)


def _mapped(
    values: pa.Array | pa.ChunkedArray,
    ascii_map: Callable[[pa.Array], pa.Array] | None,
    one: Callable[[str], str],
) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if ascii_map is not None and pc.all(pc.string_is_ascii(values)).as_py() is not False:
        return ascii_map(values)  # (all ASCII, or no value)
    return pa.array([None if v is None else one(v) for v in values.to_pylist()], pa.string())


def spark_upper(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Spark's ``upper`` of each string (NULL stays NULL)."""
    return _mapped(values, pc.ascii_upper, _upper_one)


def spark_lower(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Spark's ``lower`` of each string (NULL stays NULL)."""
    return _mapped(values, pc.ascii_lower, _lower_one)


def spark_initcap(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Spark's ``initcap`` of each string (NULL stays NULL)."""
    return _mapped(values, None, _initcap_one)
