"""Spark's runner of a Python streaming source, ended quietly when Spark hangs up.

Spark runs a Python streaming source (the change log's, PostgreSQL's) in a worker
process of its own, ``python -m pyspark.sql.streaming.python_streaming_source_runner``,
that answers the JVM over a socket. When the query stops (a stop on request, a failed
batch), the JVM closes that socket, sometimes while the runner still waits on it: the
runner reads an end of file, tries to send the error back, and the write fails on the
closed socket. Python then prints three tracebacks (``EOFError``, ``BrokenPipeError``
twice) under deltamv's one error line, about nothing: nobody listens any more.

deltamv's launcher of Spark's Python workers (:mod:`deltamv.python_worker`) runs the
runner through :func:`main`, which runs the very same module and ends the process
quietly when all that went wrong is the JVM's end of the socket. Any other error is
raised as the runner raises it. The source's own lines (a connection to PostgreSQL lost
and opened again) are logged as the driver logs deltamv's: with the time and the logger.
"""

from __future__ import annotations

import logging
import os
import runpy

from deltamv.errors import exception_chain
from deltamv.logs import to_stderr

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

_HUNG_UP = (EOFError, BrokenPipeError, ConnectionResetError)


def hung_up(error: BaseException) -> bool:
    """Whether ``error``, and every error it arose from or while handling, is the peer's
    end of the socket."""
    return all(isinstance(e, _HUNG_UP) for e in exception_chain(error))


def main() -> None:
    to_stderr(logging.INFO)
    try:
        runpy.run_module(RUNNER, run_name="__main__", alter_sys=True)
    except BaseException as error:
        if not hung_up(error):
            raise
        # Not sys.exit: the interpreter's end would flush the socket's buffer again and
        # print one more "Exception ignored" about the same closed socket.
        os._exit(1)


if __name__ == "__main__":
    main()
