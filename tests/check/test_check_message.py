"""What ``deltamv check`` says when it passes: it claims the rows are consistent only when
something looked at them (an invariant or the ground truth). A PostgreSQL job's views
have no simulator truth, and without invariants only the watermarks are checked."""

from __future__ import annotations

from rich.console import Console

from deltamv.check.commands import print_check_report
from deltamv.check.invariants import CheckReport, ViewCheck


def _printed(report: CheckReport) -> str:
    console = Console(record=True, width=160)
    print_check_report(report, console)
    return " ".join(console.export_text().split())


def test_a_pass_without_invariants_or_truth_says_the_rows_were_not_checked() -> None:
    out = _printed(CheckReport((ViewCheck("v", versions=3),), with_truth=False))
    assert "rows were not checked" in out
    assert "every version of every view is consistent" not in out


def test_a_pass_with_invariants_or_truth_says_consistent() -> None:
    held = ViewCheck("v", versions=3, invariants=["money"])
    assert "every version of every view is consistent" in _printed(CheckReport((held,), False))
    plain = ViewCheck("v", versions=3, truth_checked=3)
    assert "every version of every view is consistent" in _printed(CheckReport((plain,), True))


def test_a_pass_names_the_views_whose_rows_nothing_checked() -> None:
    held = ViewCheck("held", versions=3, invariants=["money"])
    plain = ViewCheck("plain", versions=3)
    out = _printed(CheckReport((held, plain), with_truth=False))
    assert "the rows of plain were not checked" in out
    assert "every version of every view is consistent where checked" in out
