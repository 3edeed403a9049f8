"""``upper``, ``lower`` and ``initcap`` as DuckDB computes them for the views (``views/casing.py``)
against Spark's own, over every code point, a capital sigma beside each one (what the
final-sigma rule sees of it), and random strings of the characters where the rules
bite."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.views.casing import _LOWER, _SIGMA, _UPPER, spark_upper

SIGMA = "\u03a3"


def _spark(spark: SparkSession, tmp_path: Path, strings: list[str | None]) -> pa.Table:
    path = str(tmp_path / "strings.parquet")
    pq.write_table(pa.table({"i": range(len(strings)), "s": pa.array(strings, pa.string())}), path)
    return (
        spark.read.parquet(path)
        .selectExpr("i", "upper(s) AS u", "lower(s) AS l", "initcap(s) AS t")
        .toArrow()
        .sort_by("i")
    )


def _differences(spark: SparkSession, tmp_path: Path, strings: list[str | None]) -> list[tuple]:
    theirs = _spark(spark, tmp_path, strings)
    values = pa.array(strings, pa.string())
    compute = Compute(threads=1)
    try:
        ours = compute.query(
            "SELECT spark_upper(s) AS u, spark_lower(s) AS l, spark_initcap(s) AS t FROM t",
            t=pa.table({"s": values}),
        )
    finally:
        compute.close()
    assert ours.column("u").to_pylist() == spark_upper(values).to_pylist()  # (DuckDB's call)
    out = []
    for name in ("u", "l", "t"):
        for s, a, b in zip(strings, ours.column(name).to_pylist(), theirs.column(name).to_pylist(),
                           strict=True):  # fmt: skip
            if a != b:
                out.append((name, s, a, b))
    return out


def test_every_code_point_and_a_sigma_beside_it_map_as_in_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    # Each character alone (upper and lower map each on its own but a capital sigma),
    # and in three tries of the final-sigma rule: c + Σ (Σ final where c is cased),
    # A + c + Σ (also where c is case-ignorable), A + Σ + c (not where c is cased).
    # Many to a string, the tries apart by a space, which the rule stops at (and each
    # try a word of initcap's: its first character title-cased, the others lower-cased).
    tries = [list(chars), [c + SIGMA for c in chars], ["A" + c + SIGMA for c in chars],
             ["A" + SIGMA + c for c in chars]]  # fmt: skip
    strings: list[str | None] = [
        " ".join(family[i : i + 256]) for family in tries for i in range(0, len(chars), 256)
    ]
    differences = _differences(spark, tmp_path, strings)
    assert differences == [], [(name, s[:40]) for name, s, _, _ in differences[:10]]
    # the tables are not empty here: Python's own mapping differs from Spark's for them
    assert any(c.upper() != _UPPER[c] for c in _UPPER)
    assert any(c.lower() != _LOWER[c] for c in _LOWER)


def test_random_strings_of_cased_ignorable_and_new_characters_map_as_in_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    alphabet = [SIGMA, "ς", "σ", "Α", "β", "a", "Z", " ", " ", "\t", "\u00a0", ".", "-", "_",
                "1", "\u0301", "\u00ad", "\u0345", "ß", "ﬁ", "İ", "ı", "ǅ", "ŉ", "ΐ", "😀",
                "\u200d", "'",
                *sorted(_UPPER)[:6], *sorted(_LOWER)[:6], *sorted(_SIGMA)[::25]]  # fmt: skip
    rng = random.Random(20261128)
    strings: list[str | None] = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7))) for _ in range(20_000)
    ]
    strings += [None, "", "plain ascii", "ΑΣ Β", "ΟΔΥΣΣΕΥΣ", "Σ", "ΑΣ\u0301", "A\u0301Σ1",
                "  two  spaces ", "a-b c_d\te", "mIxEd CaSe"]  # fmt: skip
    differences = _differences(spark, tmp_path, strings)
    assert differences == [], differences[:20]
    assert sum(SIGMA in s for s in strings if s) > 1000  # (the rule was tried often)
