"""The conformance checker finds each kind of contract violation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from deltamv.sim import simulate
from deltamv.sim.conformance import ConformanceError, assert_conforms, check_changelog


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("conf") / "run"
    simulate("bank", run, seed=9, txns=300, splits=3, large_every=100, segment_events=100_000)
    assert check_changelog(run / "changelog", truth=run) == []
    return run


def _edit(run: Path, tmp: Path, change: Callable[[dict[int, list[dict]]], None]) -> Path:
    copy = tmp / "run"
    shutil.copytree(run, copy)
    streams: dict[int, list[dict]] = {}
    for region_dir in sorted((copy / "changelog").iterdir()):
        rid = int(region_dir.name.split("-")[1])
        streams[rid] = [json.loads(line) for f in sorted(region_dir.iterdir()) for line in f.open()]
    change(streams)
    shutil.rmtree(copy / "changelog")
    for rid, events in streams.items():
        folder = copy / "changelog" / f"region-{rid}"
        folder.mkdir(parents=True)
        (folder / "00000000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return copy


def _first(stream: list[dict], kind: str, after: int = 0) -> int:
    return next(i for i, e in enumerate(stream) if e["type"] == kind and i >= after)


def drop_a_commit(s: dict[int, list[dict]]) -> None:
    # remove every COMMIT of one txn in region 1 (a transfer): its RESOLVED then lies
    rid = min(s)
    i = _first(s[rid], "COMMIT", 50)
    start = s[rid][i]["start_ts"]
    s[rid][:] = [e for e in s[rid] if not (e["type"] == "COMMIT" and e["start_ts"] == start)]


def resolved_backwards(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    i = _first(s[rid], "RESOLVED", 20)
    s[rid].insert(i + 1, {**s[rid][i], "ts": s[rid][i]["ts"] - 5})


def commit_without_prewrite(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    i = _first(s[rid], "COMMIT", 50)
    s[rid].insert(i + 1, {**s[rid][i], "start_ts": 12345, "commit_ts": 12346})


def prewrite_after_commit(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    i = _first(s[rid], "COMMIT", 50)
    pre = next(
        e for e in s[rid] if e["type"] == "PREWRITE" and e["start_ts"] == s[rid][i]["start_ts"]
    )
    s[rid].insert(i + 1, {**pre, "key": pre["key"] + "x"})


def bad_value(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    i = _first(s[rid], "PREWRITE", 10)
    s[rid][i] = {**s[rid][i], "value": {**s[rid][i]["value"], "balance": "lots"}}


def unknown_type(s: dict[int, list[dict]]) -> None:
    s[min(s)].append({"region": min(s), "type": "HELLO"})


def wrong_region_field(s: dict[int, list[dict]]) -> None:
    s[min(s)][3]["region"] = 999


def event_after_retired(s: dict[int, list[dict]]) -> None:
    retired = next(r for r, ev in s.items() if ev and ev[-1]["type"] == "RETIRED")
    s[retired].append({"region": retired, "type": "RESOLVED", "ts": 2**62})


def successor_scan_misses_rows(s: dict[int, list[dict]]) -> None:
    # the successor's initial scan re-emits nothing, and the parent's tail of COMMITs
    # is lost: the successor's RESOLVED then covers rows shown nowhere in its lineage
    child = next(r for r, ev in s.items() if any(e.get("parents") for e in ev))
    s[child][:] = [e for e in s[child] if e["type"] != "COMMITTED"]
    for p in next(e for e in s[child] if e["type"] == "INITIALIZED")["parents"]:
        tail = len(s[p]) * 2 // 3
        s[p][tail:] = [e for e in s[p][tail:] if e["type"] not in ("COMMIT", "RESOLVED")]


def overlapping_regions(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    init = s[rid][0]
    s[rid][0] = {**init, "end_key": init["end_key"] + "5"}


def two_commit_ts(s: dict[int, list[dict]]) -> None:
    rid = min(s)
    i = _first(s[rid], "COMMIT", 50)
    s[rid].insert(i + 1, {**s[rid][i], "commit_ts": s[rid][i]["commit_ts"] + 1})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (drop_a_commit, "was not shown before it"),
        (resolved_backwards, "RESOLVED going backwards"),
        (commit_without_prewrite, "without its PREWRITE"),
        (prewrite_after_commit, "after its COMMIT"),
        (bad_value, "is not a BIGINT"),
        (unknown_type, "unknown type"),
        (wrong_region_field, "the directory says"),
        (event_after_retired, "after RETIRED"),
        (successor_scan_misses_rows, "was not shown before it"),
        (overlapping_regions, "partition"),
        (two_commit_ts, "two commit_ts"),
    ],
)
def test_each_violation_is_found(
    pristine: Path, tmp_path: Path, change: Callable, expected: str
) -> None:
    broken = _edit(pristine, tmp_path, change)
    problems = check_changelog(broken / "changelog", truth=broken)
    assert any(expected in p for p in problems), problems[:5]
    with pytest.raises(ConformanceError):
        assert_conforms(broken / "changelog", truth=broken)


def test_a_commit_naming_a_key_its_transaction_did_not_prewrite_conforms(
    pristine: Path, tmp_path: Path
) -> None:
    """The first COMMIT of a transaction in a region commits all its rows there, and
    later ones add nothing (CONTRACT section 2): the key a COMMIT names is not checked
    against its PREWRITEs, as the job does not check it."""

    def other_keys(s: dict[int, list[dict]]) -> None:
        rid = min(s)
        i = _first(s[rid], "COMMIT", 50)
        first = s[rid][i]
        s[rid][i] = {**first, "key": first["key"] + "x"}
        s[rid].insert(i + 1, {**first, "key": first["key"] + "y"})

    edited = _edit(pristine, tmp_path, other_keys)
    assert check_changelog(edited / "changelog", truth=edited) == []


def test_duplicates_in_a_row_are_allowed_elsewhere_not(pristine: Path, tmp_path: Path) -> None:
    def dup(s: dict[int, list[dict]]) -> None:
        rid = min(s)
        s[rid].insert(5, s[rid][4])

    assert check_changelog(_edit(pristine, tmp_path, dup) / "changelog") == []


def test_a_missing_row_is_found_against_the_truth(pristine: Path, tmp_path: Path) -> None:
    def drop_txn(s: dict[int, list[dict]]) -> None:
        rid = min(s)
        i = _first(s[rid], "COMMIT", 50)
        start = s[rid][i]["start_ts"]
        for events in s.values():
            events[:] = [e for e in events if e.get("start_ts") != start]

    broken = _edit(pristine, tmp_path, drop_txn)
    assert check_changelog(broken / "changelog") == []  # consistent on its own
    assert any("not shown" in p for p in check_changelog(broken / "changelog", truth=broken))


def test_hidden_and_temporary_names_are_ignored_bad_names_are_not(
    pristine: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(pristine, copy)
    (copy / "changelog" / "region-1" / ".00000009.jsonl.tmp").write_text("garbage")
    (copy / "changelog" / "_tmp").mkdir()
    assert check_changelog(copy / "changelog") == []
    (copy / "changelog" / "region-1" / "notes.txt").write_text("x")
    assert any("not a segment name" in p for p in check_changelog(copy / "changelog"))
