"""PostgreSQL WAL positions (LSNs) as Python ints, and their ``X/Y`` text form."""

from __future__ import annotations

import re

__all__ = ["format_lsn", "parse_lsn"]

_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")
MAX_LSN = (1 << 64) - 1


def parse_lsn(text: str) -> int:
    """The int of an LSN written as PostgreSQL does (``"16/B374D848"``).

    Raises ValueError naming the text when it is not an LSN.
    """
    match = _LSN.match(text.strip())
    if not match:
        raise ValueError(f"not a PostgreSQL LSN: {text!r} (expected X/Y in hex, e.g. 16/B374D848)")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(lsn: int) -> str:
    """The ``X/Y`` text of an LSN, as PostgreSQL prints it (upper-case hex)."""
    if not 0 <= lsn <= MAX_LSN:
        raise ValueError(f"LSN {lsn} out of range 0..2**64-1")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
