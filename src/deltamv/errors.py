"""The exception families of deltamv, by what the caller can do about them.

Every error deltamv raises on purpose is a :class:`DeltaMVError` whose message is one
line saying what went wrong and where. The errors are picklable, and :func:`wire` /
:func:`unwire` carry one across a boundary that keeps only an exception's *text*: Spark
forwards an error raised in a Python worker or in the streaming planner to the driver
as a Java exception's message, so the worker raises a wired copy and the driver finds it
again in the text, whatever the file names or reasons hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "BadRecordError",
    "CommitConflictError",
    "ConfigError",
    "DeltaMVError",
    "StateError",
    "StorageError",
    "exception_chain",
    "first_line",
    "unwire",
    "wire",
]


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (Spark's error class and message, without
    its plan and JVM trace), or its type's name when it has no text."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class DeltaMVError(Exception):
    """Root of every error deltamv raises on purpose."""

    def _fields(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this error (see :func:`unwire`)."""
        return {"message": str(self.args[0]) if self.args else ""}

    @classmethod
    def _rebuild(cls, fields: dict[str, Any]) -> DeltaMVError:
        return cls(fields["message"])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (_family(type(self)), self._fields()))


class ConfigError(DeltaMVError):
    """The job configuration is wrong: fix the config. Names the offending key."""

    def __init__(self, key: str, reason: str, *, source: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.source = source
        where = f"{source}: " if source else ""
        what = f"{key}: " if key else ""  # no key: the file itself is wrong
        super().__init__(f"{where}{what}{reason}")

    def _fields(self) -> dict[str, Any]:
        return {"key": self.key, "reason": self.reason, "source": self.source}

    @classmethod
    def _rebuild(cls, fields: dict[str, Any]) -> DeltaMVError:
        return cls(fields["key"], fields["reason"], source=fields.get("source"))


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

    def _fields(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason}

    @classmethod
    def _rebuild(cls, fields: dict[str, Any]) -> DeltaMVError:
        return cls(fields["file"], fields["line"], fields["reason"])


class CommitConflictError(DeltaMVError):
    """Someone else wrote a table this job owns, or another job holds its name."""


class StorageError(DeltaMVError):
    """Reading or writing the job's storage failed (disk full, I/O error)."""


class StateError(DeltaMVError):
    """The job's checkpoint and its tables disagree in a way deltamv cannot repair."""


_FAMILIES: dict[str, type[DeltaMVError]] = {
    cls.__name__: cls
    for cls in (
        DeltaMVError,
        ConfigError,
        BadRecordError,
        CommitConflictError,
        StorageError,
        StateError,
    )
}


def _rebuild(name: str, fields: dict[str, Any]) -> DeltaMVError:
    return _FAMILIES.get(name, DeltaMVError)._rebuild(fields)


def _family(cls: type[DeltaMVError]) -> str:
    for base in cls.__mro__:
        if base.__name__ in _FAMILIES and _FAMILIES[base.__name__] is base:
            return base.__name__
    return "DeltaMVError"


_MARK = "DELTAMV_ERROR"
_WIRED = re.compile(_MARK + r"(\{.*?\})" + _MARK)
_wired_classes: dict[type[DeltaMVError], type[DeltaMVError]] = {}


def _wired_class(cls: type[DeltaMVError]) -> type[DeltaMVError]:
    found = _wired_classes.get(cls)
    if found is None:

        def __str__(self: DeltaMVError) -> str:
            payload = json.dumps({"type": _family(type(self)), "fields": self._fields()})
            return f"{cls.__str__(self)} {_MARK}{payload}{_MARK}"

        found = type(f"Wired{cls.__name__}", (cls,), {"__str__": __str__})
        _wired_classes[cls] = found
    return found


def wire(error: DeltaMVError) -> DeltaMVError:
    """The error, to raise where only its text will travel (a Spark Python worker, the
    streaming planner): the same error (same class, same fields) whose message is its own
    line followed by a marked payload, from which :func:`unwire` rebuilds it."""
    if type(error) in _wired_classes.values():
        return error
    wired = _wired_class(type(error)).__new__(_wired_class(type(error)))
    wired.__dict__.update(error.__dict__)
    wired.args = error.args
    return wired


def unwire(exc: BaseException) -> DeltaMVError | None:
    """The DeltaMVError behind ``exc``: found in its chain, or in the text of any exception
    in it (a wired error forwarded by Spark); None when there is none."""
    texts = []
    for e in exception_chain(exc):
        if isinstance(e, DeltaMVError):
            return _rebuild(_family(type(e)), e._fields())
        texts.append(str(e))
        for attr in ("desc", "stackTrace", "_desc", "_stackTrace"):
            value = getattr(e, attr, None)
            if isinstance(value, str):
                texts.append(value)
    match = _WIRED.search("\n".join(texts))
    if match is None:
        return None
    try:
        doc = json.loads(match.group(1))
        return _rebuild(str(doc["type"]), dict(doc["fields"]))
    except (ValueError, KeyError, TypeError):
        return None


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
