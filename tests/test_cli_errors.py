"""What the command line prints for errors deltamv did not expect: one line, exit 1."""

from __future__ import annotations

from typing import Any

import pytest

from deltamv import cli
from deltamv.check import commands


class _Panic(BaseException):
    """As delta-rs' ``PanicException``: a BaseException, not an Exception."""


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (ValueError("bad\nthing"), "deltamv: internal error: ValueError: bad thing (-v shows"),
        (_Panic("Invalid object store url"), "deltamv: internal error: _Panic: Invalid object"),
        (OSError(28, "No space left on device", "/out/v"),
         "deltamv: error: storage failed (/out/v): No space left on device"),
    ],
)  # fmt: skip
def test_an_unexpected_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException,
    line: str,
) -> None:  # fmt: skip
    def fail(args: Any) -> int:
        raise error

    monkeypatch.setattr(commands, "_status", fail)
    assert cli.main(["status", "any.toml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
