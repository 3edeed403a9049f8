"""The exception families of deltamv, by what the caller can do about them."""

from __future__ import annotations

from collections.abc import Iterator


class DeltaMVError(Exception):
    """Root of every error deltamv raises on purpose."""


class ConfigError(DeltaMVError):
    """The job configuration is wrong: fix the config. Names the offending key."""

    def __init__(self, key: str, reason: str, *, source: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {reason}")


class BadRecordError(DeltaMVError):
    """The change log holds something the contract does not allow: fix the input.

    Carries the segment file and, where one applies, the 1-based line number.
    """

    def __init__(self, file: str, line: int | None, reason: str) -> None:
        self.file = file
        self.line = line
        self.reason = reason
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"bad record at {where}: {reason}")


class CommitConflictError(DeltaMVError):
    """Someone else wrote a table this job owns, or another job holds its name."""


class StorageError(DeltaMVError):
    """Reading or writing the job's storage failed (disk full, I/O error)."""


class StateError(DeltaMVError):
    """The job's checkpoint and its tables disagree in a way deltamv cannot repair."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception in its causes and contexts, each once.

    Spark hands a failure on an executor or in a streaming callback to the driver
    wrapped in its own exceptions; the original is somewhere down this chain, or only
    in the text of one of them.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([e.__cause__, e.__context__])
