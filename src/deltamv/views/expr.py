"""Spark expressions as DuckDB SQL with Spark's semantics, or a reason why not.

The incremental engine evaluates a view's expressions (projections, filters, join keys,
aggregate arguments) in DuckDB over the batch's changed rows. Only expressions whose
DuckDB form gives exactly Spark's result (under ANSI mode, which deltamv's sessions use)
are translated; anything else raises :class:`Unsupported` and the view is recomputed by
Spark instead. Where the two engines differ, the translation spells Spark's behaviour
out: a cast of a fraction to an integer truncates, a division by zero is an error, every
result is cast to the type Spark gives it. The differential tests (Spark against this
translation on random data) decide what belongs on the list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from deltamv.views.plan import Expr

__all__ = ["Unsupported", "duck_type", "result_type", "sql", "to_sql_literal"]


class Unsupported(Exception):
    """An expression or plan shape the incremental engine does not maintain; the message
    is the reason, shown as ``recompute: <reason>``."""


_SIMPLE_TYPES = {
    "long": "BIGINT",
    "integer": "INTEGER",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "double": "DOUBLE",
    "float": "FLOAT",
    "string": "VARCHAR",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
    "binary": "BLOB",
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")
_INTEGRAL = ("byte", "short", "integer", "long")
_DIGITS = {"byte": 3, "short": 5, "integer": 10}  # of each one's largest value
_FRACTIONAL = ("float", "double")


def decimal_of(dtype: Any) -> tuple[int, int] | None:
    if isinstance(dtype, str):
        m = _DECIMAL.fullmatch(dtype)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def duck_type(dtype: Any) -> str:
    """The DuckDB type of a Spark JSON data type."""
    if isinstance(dtype, str):
        if dtype in _SIMPLE_TYPES:
            return _SIMPLE_TYPES[dtype]
        dec = decimal_of(dtype)
        if dec is not None:
            return f"DECIMAL({dec[0]},{dec[1]})"
        if dtype.startswith("char(") or dtype.startswith("varchar("):
            return "VARCHAR"
    raise Unsupported(f"values of type {dtype}")


def _bounded(precision: int, scale: int) -> tuple[int, int]:
    """Spark's DecimalType.adjustPrecisionScale (precision loss allowed, the default)."""
    if precision <= 38:
        return precision, scale
    digits = precision - scale
    min_scale = min(scale, 6)
    scale = max(38 - digits, min_scale)
    return 38, scale


def result_type(e: Expr) -> Any:
    """Spark's data type of ``e`` (the plan carries it only on some nodes)."""
    kind = e.kind
    if "dataType" in e.fields and e.fields["dataType"] is not None:
        return e.fields["dataType"]
    if kind in ("Alias", "KnownFloatingPointNormalized", "NormalizeNaNAndZero", "KnownNotNull",
                "UnaryMinus", "Abs", "UnaryPositive"):  # fmt: skip
        return result_type(e.children[0])
    if kind in _BOOLEAN_KINDS:
        return "boolean"
    if kind in ("Add", "Subtract", "Multiply", "Remainder", "Pmod"):
        left, right = result_type(e.children[0]), result_type(e.children[1])
        dl, dr = decimal_of(left), decimal_of(right)
        if dl and dr:
            (p1, s1), (p2, s2) = dl, dr
            if kind in ("Add", "Subtract"):
                scale = max(s1, s2)
                p, s = max(p1 - s1, p2 - s2) + scale + 1, scale
            elif kind == "Multiply":
                p, s = p1 + p2 + 1, s1 + s2
            else:
                s = max(s1, s2)
                p = min(p1 - s1, p2 - s2) + s
            p, s = _bounded(p, s)
            return f"decimal({p},{s})"
        return left
    if kind == "IntegralDivide":
        return "long"
    if kind == "Divide":
        left = result_type(e.children[0])
        if decimal_of(left) is not None:
            raise Unsupported("decimal division")
        return "double"
    if kind in ("If",):
        return result_type(e.children[1])
    if kind == "CaseWhen":
        return result_type(e.children[1])
    if kind in ("Coalesce", "Greatest", "Least"):
        return result_type(e.children[0])
    if kind in ("Concat", "ConcatWs", "Substring", "StringReplace", "StringTranslate",
                "Upper", "Lower", "InitCap", "StringLPad", "StringRPad", "StringRepeat",
                "Reverse", *_TRIMS, *_DIGESTS):  # fmt: skip
        return "string"
    if kind in ("Length", "StringInstr", "StringLocate", "Ascii", "OctetLength"):
        return "integer"  # (Spark's INT)
    if kind in ("Round", "BRound", "Floor", "Ceil"):
        return _rounded_type(e)
    if kind == "DateAdd" or kind == "DateSub" or kind == "TruncDate":
        return "date"
    if kind in _DATE_PARTS or kind == "DateDiff":
        return "integer"
    if kind == "TruncTimestamp":
        return "timestamp"
    if kind == "Sqrt":
        return "double"
    if kind in _BITWISE:
        return result_type(e.children[0])
    raise Unsupported(f"expression {kind}")


_BOOLEAN_KINDS = {
    "EqualTo", "EqualNullSafe", "LessThan", "LessThanOrEqual", "GreaterThan",
    "GreaterThanOrEqual", "And", "Or", "Not", "IsNull", "IsNotNull", "In", "InSet",
    "StartsWith", "EndsWith", "Contains", "Like", "IsNaN",
}  # fmt: skip

# Spark's trims take off spaces (U+0020) only, or each character of the set given;
# DuckDB's, given the set, the same.
_TRIMS = {"StringTrim": "trim", "StringTrimLeft": "ltrim", "StringTrimRight": "rtrim"}
# Functions of strings whose SQL is a fixed template over their arguments' SQL.
_STRING_TEMPLATES = {
    "StringReplace": "replace({}, {}, {})",  # every occurrence, left to right
    "StringTranslate": "translate({}, {}, {})",
    "StringInstr": "CAST(instr({}, {}) AS INTEGER)",  # in characters, 0 if none
    "Ascii": "CAST(ascii({}) AS INTEGER)",  # the first character's code point, 0 for ''
    "OctetLength": "CAST(strlen({}) AS INTEGER)",  # bytes of UTF-8
    "Upper": "spark_upper({})",  # Spark's (ICU's) case mapping: views/casing.py
    "Lower": "spark_lower({})",
    "InitCap": "spark_initcap({})",
    "StringLPad": "spark_lpad({}, CAST({} AS INTEGER), {})",  # views/padding.py
    "StringRPad": "spark_rpad({}, CAST({} AS INTEGER), {})",
    "StringRepeat": "spark_repeat({}, CAST({} AS INTEGER))",
    "Reverse": "spark_reverse({})",  # by code points (compute.py); of arrays: a recompute
}

# Digests as lower-case hexadecimal, in both engines. Spark hashes bytes: a string
# arrives cast to binary (its UTF-8), the bytes DuckDB hashes of a VARCHAR.
_DIGESTS = {"Md5": "md5", "Sha1": "sha1", "Sha2": "sha256"}

_COMPARE = {
    "EqualTo": "=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def to_sql_literal(value: Any, dtype: Any) -> str:
    """A typed DuckDB literal for a Spark literal's JSON ``value`` (a string or null)."""
    t = duck_type(dtype)
    if value is None:
        return f"CAST(NULL AS {t})"
    text = str(value)
    if dtype == "string":
        return _quote(text)
    if dtype == "boolean":
        return "TRUE" if text.lower() == "true" else "FALSE"
    if dtype == "date":
        # Spark writes a date literal as days since the epoch.
        if text.lstrip("-").isdigit():
            return f"(DATE '1970-01-01' + INTERVAL ({int(text)}) DAY)::DATE"
        return f"DATE {_quote(text)}"
    if dtype in ("timestamp", "timestamp_ntz"):
        # Read in DuckDB's TimeZone, which the driver's engine sets to UTC (compute.py),
        # as deltamv's Spark sessions render them.
        if text.lstrip("-").isdigit():  # microseconds since the epoch (UTC)
            return f"CAST(make_timestamp(CAST({int(text)} AS BIGINT)) AS {t})"
        return f"CAST({_quote(text)} AS {t})"
    if dtype == "binary":
        raise Unsupported("binary literals")
    return f"CAST({_quote(text)} AS {t})"


# Expressions whose SQL is a fixed template over their children's SQL, in order.
_TEMPLATES = {
    "And": "({} AND {})",
    "Or": "({} OR {})",
    "Not": "(NOT {})",
    "IsNull": "({} IS NULL)",
    "IsNotNull": "({} IS NOT NULL)",
    "IsNaN": "coalesce(isnan({}), FALSE)",
    "If": "(CASE WHEN {} THEN {} ELSE {} END)",
    "StartsWith": "starts_with({}, {})",
    "EndsWith": "ends_with({}, {})",
    "Contains": "contains({}, {})",
}


# Parts of a date (or, the last three, of a timestamp), as Spark's INT. Both engines
# count in the proleptic Gregorian calendar, and both evaluate in UTC (session.py,
# compute.py).
_DATE_PARTS = {
    "Year": "year({})",
    "Quarter": "quarter({})",
    "Month": "month({})",
    "DayOfMonth": "day({})",
    "DayOfYear": "dayofyear({})",
    "DayOfWeek": "(dayofweek({}) + 1)",  # Spark: 1 is Sunday; DuckDB: 0 is
    "WeekDay": "(isodow({}) - 1)",  # Spark: 0 is Monday
    "WeekOfYear": "week({})",  # ISO 8601 weeks in both
    "Hour": "hour({})",
    "Minute": "minute({})",
    "Second": "second({})",  # whole seconds
}

# Spark's truncation levels by name (DateTimeUtils.parseTruncLevel); another name gives
# NULL. A date truncates to a week or longer only (``trunc(d, 'DD')`` is NULL).
_TRUNC_LEVELS = {
    "MICROSECOND": "microseconds", "MILLISECOND": "milliseconds", "SECOND": "second",
    "MINUTE": "minute", "HOUR": "hour", "DAY": "day", "DD": "day", "WEEK": "week",
    "MON": "month", "MONTH": "month", "MM": "month", "QUARTER": "quarter", "YEAR": "year",
    "YYYY": "year", "YY": "year",
}  # fmt: skip
_DATE_LEVELS = ("week", "month", "quarter", "year")


def _truncated(e: Expr, fmt: Expr, value: str) -> str:
    """``date_trunc(fmt, ts)`` (TruncTimestamp) or ``trunc(date, fmt)`` (TruncDate)."""
    if fmt.kind != "Literal":
        raise Unsupported(f"{e.kind} to a level that is not a constant")
    name = fmt.fields.get("value")
    level = _TRUNC_LEVELS.get(str(name).upper()) if name is not None else None
    t = duck_type(result_type(e))
    if level is None or (e.kind == "TruncDate" and level not in _DATE_LEVELS):
        return f"CAST(NULL AS {t})"
    return f"CAST(date_trunc('{level}', {value}) AS {t})"


def _divided(dividend: str, op: str, divisor: str, duck: str) -> str:
    """``dividend op divisor`` as ``duck``, failing on a zero divisor as Spark's ANSI
    mode does: only where the dividend is not NULL (Spark looks at it before it fails;
    NULL / 0 is NULL, as a LEFT JOIN's padded row divided by a column of 0 is)."""
    return (f"(CASE WHEN {divisor} = 0 AND ({dividend}) IS NOT NULL"
            " THEN error('[DIVIDE_BY_ZERO] Division by zero')"
            f" ELSE CAST({dividend} {op} {divisor} AS {duck}) END)")  # fmt: skip


def _rounded_type(e: Expr) -> Any:
    """Spark's type of ``round``/``bround`` (to a constant scale), ``floor`` and ``ceil``
    of a decimal or an integer (RoundBase, Floor, Ceil): one more integral digit, for the
    carry. Where that passes 38 digits Spark risks an overflow; such a view is recomputed."""
    source = result_type(e.children[0])
    dec = decimal_of(source)
    if e.kind in ("Floor", "Ceil"):
        if source in ("long", "double"):
            return "long"
        if dec is None:
            raise Unsupported(f"{e.kind.lower()} of {source} values")
        precision, scale = dec[0] - dec[1] + 1, 0
    else:
        places = e.children[1]
        if places.kind != "Literal" or places.fields.get("value") is None:
            raise Unsupported(f"{e.kind.lower()} to a scale that is not a constant")
        to = int(places.fields["value"])
        if source in _INTEGRAL and to >= 0:
            return source  # (its value too)
        if dec is None:
            raise Unsupported(f"{e.kind.lower()} of {source} values to scale {to}")
        digits = dec[0] - dec[1] + 1
        if to < 0:
            precision, scale = max(digits, 1 - to), 0
        else:
            scale = min(dec[1], to)
            precision = digits + scale
    if precision > 38:
        raise Unsupported(f"{e.kind.lower()} of {source}: Spark may overflow decimal(38)")
    return f"decimal({precision},{scale})"


def _substring(text: str, pos: str, length: str) -> str:
    """Spark's ``substring(text, pos, length)`` (UTF8String.substringSQL), in code points as
    DuckDB's ``substring`` counts: a position above 0 counts from 1, one below 0 from the
    end, 0 is the first; the part before the start of the string is cut off the length.
    DuckDB's ``greatest`` passes over NULLs: a NULL argument gives NULL first."""
    start = (f"(CASE WHEN {pos} > 0 THEN CAST({pos} AS BIGINT) - 1"
             f" WHEN {pos} < 0 THEN length({text}) + {pos} ELSE 0 END)")  # fmt: skip
    first = f"greatest({start}, 0)"
    return (f"(CASE WHEN {text} IS NULL OR {pos} IS NULL OR {length} IS NULL THEN NULL"
            f" ELSE substring({text}, {first} + 1,"
            f" greatest({start} + CAST({length} AS BIGINT) - {first}, 0)) END)")  # fmt: skip


def sql(e: Expr, col: Callable[[int], str]) -> str:
    """DuckDB SQL computing ``e`` as Spark does; ``col(expr_id)`` names an attribute's column.

    Raises Unsupported with a reason for anything outside the translated set.
    """
    kind = e.kind
    kids = e.children

    def sub(i: int) -> str:
        return sql(kids[i], col)

    if kind == "AttributeReference":
        return col(int(e.fields["exprId"]["id"]))
    if kind == "Literal":
        return to_sql_literal(e.fields.get("value"), e.fields.get("dataType"))
    if kind in ("Alias", "KnownNotNull", "UnaryPositive"):
        return sub(0)
    if kind in ("KnownFloatingPointNormalized",):
        return sub(0)
    if kind == "NormalizeNaNAndZero":
        x = sub(0)
        t = duck_type(result_type(kids[0]))
        return f"(CASE WHEN isnan({x}) THEN CAST('NaN' AS {t}) WHEN {x} = 0 THEN CAST(0 AS {t}) ELSE {x} END)"
    if kind in _COMPARE:
        _check_comparable(kids[0])
        return f"({sub(0)} {_COMPARE[kind]} {sub(1)})"
    if kind == "EqualNullSafe":
        _check_comparable(kids[0])
        return f"({sub(0)} IS NOT DISTINCT FROM {sub(1)})"
    if kind in ("And", "Or") and can_fail(kids[1]):
        return _lazy(kind, kids, col)
    if kind in _TEMPLATES:
        return _TEMPLATES[kind].format(*(sql(k, col) for k in kids))
    if kind == "In":
        _check_comparable(kids[0])
        return f"({sub(0)} IN ({', '.join(sql(k, col) for k in kids[1:])}))"
    if kind == "InSet":
        values = e.fields.get("hset")
        if not isinstance(values, list):
            raise Unsupported("IN over a set Spark did not list")
        dtype = result_type(kids[0])
        items = ", ".join(to_sql_literal(v, dtype) for v in values)
        return f"({sub(0)} IN ({items}))"
    if kind in ("Add", "Subtract", "Multiply"):
        op = {"Add": "+", "Subtract": "-", "Multiply": "*"}[kind]
        t = result_type(e)
        if t in ("date", "timestamp", "timestamp_ntz"):
            raise Unsupported(f"{kind} of {t} values")
        left, right = sub(0), sub(1)
        dl, dr = decimal_of(result_type(kids[0])), decimal_of(result_type(kids[1]))
        result = decimal_of(t)
        if kind != "Multiply" and dl and dr and result and result[1] < max(dl[1], dr[1]):
            # Spark adds exactly, then rounds to its type's smaller scale; DuckDB's
            # DECIMAL(38) overflows first
            raise Unsupported(f"decimal({dl[0]},{dl[1]}) {op} decimal({dr[0]},{dr[1]}): Spark"
                              f" rounds the result to {t}")  # fmt: skip
        if kind == "Multiply" and dl and dr:
            # DuckDB types a product of two decimals of at most 18 digits as at most
            # DECIMAL(18), failing where Spark's wider type holds the result: multiply
            # as DECIMAL(38)s (an exact product), when Spark keeps its whole scale.
            if result is None or result[1] < dl[1] + dr[1]:
                # Spark rounds such a product to its type's scale; the exact product
                # can outgrow DECIMAL(38) where the rounded one fits
                raise Unsupported(
                    f"decimal({dl[0]},{dl[1]}) * decimal({dr[0]},{dr[1]}): Spark rounds"
                    f" the product to {t}"
                )
            left = f"CAST({left} AS DECIMAL(38,{dl[1]}))"
            right = f"CAST({right} AS DECIMAL(38,{dr[1]}))"
        return f"CAST(({left} {op} {right}) AS {duck_type(t)})"
    if kind == "Divide":
        return _divided(sub(0), "/", sub(1), duck_type(result_type(e)))
    if kind == "IntegralDivide":
        if any(decimal_of(result_type(k)) or result_type(k) in _FRACTIONAL for k in kids):
            raise Unsupported("DIV of non-integral values")
        return _divided(sub(0), "//", sub(1), "BIGINT")
    if kind == "Pmod":
        return _pmod(e, sub(0), sub(1))
    if kind in _DIGESTS:
        return _digest(e, col)
    if kind == "Remainder":
        t = result_type(e)
        if t in _FRACTIONAL:
            raise Unsupported("% of floating-point values")
        return _divided(sub(0), "%", sub(1), duck_type(t))
    if kind in ("UnaryMinus", "Abs"):
        dec = decimal_of(result_type(kids[0]))
        if dec is not None and dec[0] > 34:
            # Spark negates a decimal through Scala's BigDecimal, rounding it to 34 digits
            raise Unsupported(
                f"{'-' if kind == 'UnaryMinus' else 'abs'} of decimal({dec[0]},{dec[1]})"
            )
        op = "-" if kind == "UnaryMinus" else "abs"
        return f"CAST({op}({sub(0)}) AS {duck_type(result_type(e))})"
    if kind == "CaseWhen":
        parts = ["CASE"]
        pairs = len(kids) // 2
        for i in range(pairs):
            parts.append(f"WHEN {sub(2 * i)} THEN {sub(2 * i + 1)}")
        if len(kids) % 2:
            parts.append(f"ELSE {sub(len(kids) - 1)}")
        parts.append("END")
        return "(" + " ".join(parts) + ")"
    if kind == "Coalesce":
        return f"coalesce({', '.join(sql(k, col) for k in kids)})"
    if kind == "Cast":
        return _cast(e, sub(0), col)
    if kind == "Concat":
        if any(result_type(k) != "string" for k in kids):
            raise Unsupported("concat of non-string values")
        return "(" + " || ".join(sql(k, col) for k in kids) + ")"
    if kind == "Length":
        if result_type(kids[0]) != "string":
            raise Unsupported("length of non-string values")
        return f"CAST(length({sub(0)}) AS INTEGER)"
    if kind in ("Substring", "ConcatWs", "StringLocate", *_TRIMS, *_STRING_TEMPLATES):
        # (Spark casts their other arguments to strings; the first may be binary, and
        # concat_ws's others arrays)
        if any(result_type(k) != "string" for k in kids[: None if kind == "ConcatWs" else 1]):
            raise Unsupported(f"{kind} of non-string values")
        if kind == "StringLocate":  # (substr, str, start): instr's where start is 1
            start = kids[2]
            if start.kind != "Literal" or str(start.fields.get("value")) != "1":
                raise Unsupported("locate() from a position other than a literal 1")
            if result_type(kids[1]) != "string":
                raise Unsupported("locate() in non-string values")
            return f"CAST(instr({sub(1)}, {sub(0)}) AS INTEGER)"
        if kind == "Substring":  # (str, pos, len); left() and right() arrive as it
            return _substring(sub(0), sub(1), sub(2))
        if kind == "ConcatWs":  # (separator, values...): NULL values left out
            return f"concat_ws({', '.join(sql(k, col) for k in kids)})"
        if kind in _TRIMS:
            chars = sub(1) if len(kids) > 1 else "' '"
            return f"{_TRIMS[kind]}({sub(0)}, {chars})"
        return _STRING_TEMPLATES[kind].format(*(sql(k, col) for k in kids))
    if kind in ("Greatest", "Least"):  # both pass over NULLs
        if any(result_type(k) in _FRACTIONAL for k in kids):
            raise Unsupported(f"{kind.lower()} of floating-point values")
        for k in kids:
            _check_comparable(k)
        return f"{kind.lower()}({', '.join(sql(k, col) for k in kids)})"
    if kind in ("Round", "BRound", "Floor", "Ceil"):
        t = result_type(e)
        if result_type(kids[0]) in _INTEGRAL:
            return sub(0)  # (rounded to a scale of 0 or more)
        if kind in ("Floor", "Ceil") and result_type(kids[0]) == "double":
            # Java's (long) of the double: NaN is 0, beyond BIGINT its bound
            x = f"{kind.lower()}({sub(0)})"
            return (f"(CASE WHEN isnan({x}) THEN CAST(0 AS BIGINT)"
                    f" WHEN {x} >= 9223372036854775807 THEN CAST(9223372036854775807 AS BIGINT)"
                    f" WHEN {x} <= -9223372036854775808 THEN CAST(-9223372036854775808 AS BIGINT)"
                    f" ELSE CAST({x} AS BIGINT) END)")  # fmt: skip
        if kind in ("Floor", "Ceil"):
            return f"CAST({kind.lower()}({sub(0)}) AS {duck_type(t)})"
        # half up (away from zero) for round, to the even neighbour for bround
        function = "round" if kind == "Round" else "round_even"
        places = int(kids[1].fields["value"])
        return f"CAST({function}({sub(0)}, {places}) AS {duck_type(t)})"
    if kind == "Like":
        # Spark's plan does not carry LIKE's escape character (ESCAPE '!' or the default
        # backslash): the patterns it simplifies (prefix%, %suffix, %infix%) arrive as
        # StartsWith, EndsWith, Contains; the others are recomputed.
        raise Unsupported("LIKE with a pattern Spark does not simplify (_, or not a literal)")
    if kind in _DATE_PARTS:
        return f"CAST({_DATE_PARTS[kind].format(sub(0))} AS INTEGER)"
    if kind == "TruncTimestamp":  # (format, timestamp)
        return _truncated(e, kids[0], sub(1))
    if kind == "TruncDate":  # (date, format)
        return _truncated(e, kids[1], sub(0))
    if kind == "DateDiff":  # (end, start): days
        return f"CAST(({sub(0)}) - ({sub(1)}) AS INTEGER)"
    if kind == "DateAdd":
        return f"CAST({sub(0)} + CAST({sub(1)} AS INTEGER) AS DATE)"
    if kind == "DateSub":
        return f"CAST({sub(0)} - CAST({sub(1)} AS INTEGER) AS DATE)"
    if kind == "Sqrt":  # (correctly rounded in both; of a negative number NaN in both)
        return f"sqrt(CAST({sub(0)} AS DOUBLE))"
    if kind in _BITWISE:
        t = result_type(e)
        if t not in _INTEGRAL:
            raise Unsupported(f"{kind} of {t} values")
        return (
            f"CAST({_BITWISE[kind].format(*(sub(i) for i in range(len(kids))))} AS {duck_type(t)})"
        )
    raise Unsupported(f"expression {kind}")


# Spark's bitwise operators on integers (&, |, ^, ~), of two's complement in both engines.
_BITWISE = {
    "BitwiseAnd": "({} & {})",
    "BitwiseOr": "({} | {})",
    "BitwiseXor": "xor({}, {})",
    "BitwiseNot": "(~{})",
}


def _pmod(e: Expr, value: str, divisor: str) -> str:
    """``pmod(a, n)`` of integers by a constant ``n`` above 0: ``a % n`` (the sign of
    ``a``, as DuckDB's), moved up by ``n`` where negative (Spark's Pmod; by 0 it fails in
    ANSI mode, by a negative ``n`` it is negative or 0)."""
    t = result_type(e)
    n = e.children[1]
    if t not in _INTEGRAL:
        raise Unsupported(f"pmod of {t} values")
    if n.kind != "Literal" or n.fields.get("value") is None or int(n.fields["value"]) <= 0:
        raise Unsupported("pmod by a divisor other than a constant above 0")
    r = f"({value} % {divisor})"
    return f"CAST((CASE WHEN {r} < 0 THEN {r} + {divisor} ELSE {r} END) AS {duck_type(t)})"


def _digest(e: Expr, col: Callable[[int], str]) -> str:
    """``md5``, ``sha1``/``sha`` and ``sha2(_, 256)`` of a string."""
    value = e.children[0]
    if value.kind != "Cast" or result_type(value.children[0]) != "string":
        raise Unsupported(f"{e.kind.lower()} of values that are not strings")
    if e.kind == "Sha2":
        bits = e.children[1]
        if bits.kind != "Literal" or str(bits.fields.get("value")) not in ("0", "256"):
            raise Unsupported("sha2 to a bit length other than 256")
    return f"{_DIGESTS[e.kind]}({sql(value.children[0], col)})"


# Expressions that never fail on any value (their children may).
_TOTAL = {
    "AttributeReference", "Literal", "Alias", "KnownNotNull", "UnaryPositive",
    "KnownFloatingPointNormalized", "NormalizeNaNAndZero", "EqualNullSafe", "And", "Or",
    "Not", "IsNull", "IsNotNull", "IsNaN", "In", "InSet", "If", "CaseWhen", "Coalesce",
    "StartsWith", "EndsWith", "Contains", "Concat", "Length", *_COMPARE, *_DATE_PARTS,
    "TruncTimestamp", "TruncDate", "DateDiff", "Substring", "ConcatWs", "StringLocate", *_TRIMS,
    *_STRING_TEMPLATES, "Greatest", "Least", "Round", "BRound", "Floor", "Ceil",
    "Pmod", *_DIGESTS,  # (pmod by a constant above 0 alone)
}  # fmt: skip
_LAZY_DEPTH = 6  # each level copies its left side once: at most 2^6 copies


def can_fail(e: Expr) -> bool:
    """Whether evaluating ``e`` may raise on some row (a division by zero, an overflow, a
    cast that cannot be made): Spark's ANSI mode fails there, and so does DuckDB."""
    return e.kind not in _TOTAL or any(can_fail(k) for k in e.children)


def _lazy(kind: str, kids: Sequence[Expr], col: Callable[[int], str]) -> str:
    """``a AND b`` / ``a OR b`` evaluating ``b`` only where Spark does: not where ``a``
    alone decides (FALSE for AND, TRUE for OR). DuckDB evaluates both sides of a
    conjunction outside a filter, so a ``b`` that fails on a row ``a`` rules out would
    fail there. Where ``a`` does not decide, ``b AND a`` (``b OR a``) gives Spark's
    three-valued result."""
    depth = _lazy_depth(kids[0])
    if depth >= _LAZY_DEPTH:
        raise Unsupported(f"more than {_LAZY_DEPTH} nested AND/OR over values that can fail")
    a, b = sql(kids[0], col), sql(kids[1], col)
    decided = "FALSE" if kind == "And" else "TRUE"
    op = "AND" if kind == "And" else "OR"
    return f"(CASE WHEN ({a}) IS {decided} THEN {decided} ELSE (({b}) {op} ({a})) END)"


def _lazy_depth(e: Expr) -> int:
    own = 1 if e.kind in ("And", "Or") and can_fail(e.children[1]) else 0
    return own + max((_lazy_depth(k) for k in e.children), default=0)


def _check_comparable(e: Expr) -> None:
    t = result_type(e)
    if isinstance(t, dict):
        raise Unsupported(f"comparison of {t.get('type', 'nested')} values")


def _cast(e: Expr, inner: str, col: Callable[[int], str]) -> str:
    source = result_type(e.children[0])
    target = e.fields.get("dataType")
    if source == target:
        return inner
    t = duck_type(target)
    numeric = (*_INTEGRAL, *_FRACTIONAL)
    if target in _INTEGRAL and (source in _FRACTIONAL or decimal_of(source)):
        dec = decimal_of(source)
        if dec and dec[0] > 18 and target != "long" and dec[0] - dec[1] >= _DIGITS[target]:
            # Spark checks a wide decimal's range for INT, SMALLINT and TINYINT in double
            # (for BIGINT exactly): values just inside the bound fail there
            raise Unsupported(f"cast of {source} to {target}")
        # Spark truncates a fraction towards zero; DuckDB would round it.
        if target == "long" and source in _FRACTIONAL:
            # Spark's range check compares in double, where Long.MaxValue is 2^63: 2^63
            # itself becomes Long.MaxValue; DuckDB refuses it
            return (f"(CASE WHEN trunc({inner}) = 9223372036854775808.0"
                    f" THEN CAST(9223372036854775807 AS BIGINT)"
                    f" ELSE CAST(trunc({inner}) AS BIGINT) END)")  # fmt: skip
        return f"CAST(trunc({inner}) AS {t})"
    if source == "double" and target == "float":
        # Spark makes a value beyond FLOAT's range infinite; DuckDB refuses it
        raise Unsupported(f"cast of {source} to {target}")
    if (source in numeric or decimal_of(source)) and (target in numeric or decimal_of(target)):
        if source in _FRACTIONAL and decimal_of(target):
            raise Unsupported(f"cast of {source} to {target}")
        return f"CAST({inner} AS {t})"
    if target == "string" and (source in _INTEGRAL or source == "string"):
        return f"CAST({inner} AS VARCHAR)"
    if target == "string" and decimal_of(source):
        return f"CAST({inner} AS VARCHAR)"
    if source == "boolean" and target in _INTEGRAL:
        return f"CAST({inner} AS {t})"
    if source in ("timestamp", "timestamp_ntz") and target == "date":
        return f"CAST({inner} AS DATE)"  # (the date in UTC, the session's time zone)
    if source == "date" and target in ("timestamp", "timestamp_ntz"):
        raise Unsupported(f"cast of {source} to {target}")
    raise Unsupported(f"cast of {source} to {target}")
