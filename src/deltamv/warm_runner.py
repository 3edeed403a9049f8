"""A warm process that forks the streaming source's runner, so that a query starts
without waiting for a fresh Python to import pyspark.

Spark runs a Python streaming source (the change log's, PostgreSQL's) in a process of its
own, started at each start of a streaming query: ``python -m
pyspark.sql.streaming.python_streaming_source_runner``, through deltamv's launcher
(:mod:`deltamv.python_worker`). A fresh interpreter spends 0.3-0.8 s here importing
pyspark, pyarrow and deltamv before it connects back to the JVM, and the query's first
batch waits for it: a large part of a ``deltamv run --once`` that takes 1-3 s.

:func:`serve` starts, beside the driver, one server per driver JVM. It imports those
modules once, then listens on a Unix socket in the launcher's folder named by the JVM's
process id (the launcher's parent). The launcher sends it its standard streams (as file
descriptors), its arguments, environment and working folder; the server forks, and the
child takes them over and runs the runner as the launcher would have
(:func:`deltamv.source_runner.main`). The child sends the launcher its process id and, at
its end, its exit status; the launcher passes signals on to it and exits with that status,
so Spark sees the launcher as the runner. Where anything fails before the fork (no
server, a refused connection), the launcher runs the runner itself, as without a server.

A server ends with its driver (the kernel's parent-death signal, and a look at its parent
every few seconds), with its JVM, or after ``forks`` forks (one for ``deltamv run``, whose
process starts one query).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import traceback
from typing import Any

from deltamv.python_worker import LAUNCHER_PREFIX, RUNNER_SOCKET

log = logging.getLogger("deltamv.session")

_POLL = 2.0  # seconds between its looks at its parent and its JVM
_PR_SET_PDEATHSIG = 1
_SOCKET = re.compile(re.escape(RUNNER_SOCKET).replace("%d", r"(\d+)"))  # (its JVM's id)

_servers: dict[int, subprocess.Popen[bytes]] = {}  # JVM process id -> its server


def socket_path(folder: str, jvm_pid: int) -> str:
    """Where the server of the JVM ``jvm_pid`` listens (the launcher builds the same)."""
    return os.path.join(folder, RUNNER_SOCKET % jvm_pid)


def serve(spark: Any, forks: int | None = None) -> bool:
    """Start the server for ``spark``'s JVM, unless one runs; True when one runs.

    Only where Spark's Python workers start through deltamv's launcher (a local master):
    the launcher is what asks the server. ``forks``: how many runners it forks before it
    ends (None: as many as asked for)."""
    launcher = spark.sparkContext.pythonExec or ""
    if not os.path.basename(launcher).startswith(LAUNCHER_PREFIX):
        return False
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    running = _servers.get(jvm)
    if running is not None and running.poll() is None:
        return True
    folder = os.path.dirname(launcher)
    clear_stale(folder)
    path = socket_path(folder, jvm)
    if len(path.encode()) > 100:  # (a Unix socket's path holds 107 bytes)
        log.info("no warm runner: the socket path %s is too long", path)
        return False
    _servers[jvm] = subprocess.Popen(
        [sys.executable, "-m", __name__, path, str(jvm), str(forks or 0)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return True


def clear_stale(folder: str) -> int:
    """Remove the sockets in ``folder`` of servers whose JVM is gone (a server killed
    outright leaves its socket behind); returns how many."""
    removed = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            found = _SOCKET.fullmatch(entry.name)
            if found is None or _alive(int(found.group(1))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed += 1
    return removed


# -- the server ---------------------------------------------------------------------------
def main(argv: list[str]) -> None:
    path, jvm, forks = argv[0], int(argv[1]), int(argv[2])
    parent = os.getppid()
    _die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the runners are reaped by the kernel
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # (a server of an earlier JVM with the same id, killed)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # (in the launcher's folder: this user's alone)
    bound = os.stat(path).st_ino
    try:
        listener.listen(8)  # a launcher that connects now waits for the imports
        _warm()
        listener.settimeout(_POLL)
        served = 0
        while not forks or served < forks:
            if os.getppid() != parent or not _alive(jvm):
                break
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                if _fork(listener, conn):
                    served += 1
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == bound:  # (not a later server's)
                os.unlink(path)


def _warm() -> None:
    """Import what the runner and deltamv's sources import."""
    import importlib

    import deltamv.changelog.source
    from deltamv.source_runner import RUNNER

    importlib.import_module(RUNNER)
    del sys.modules[RUNNER]  # (what it imports stays: runpy runs the module itself anew)

    with contextlib.suppress(ImportError):  # (psycopg: an optional dependency)
        import deltamv.postgres.source  # noqa: F401


def _fork(listener: socket.socket, conn: socket.socket) -> bool:
    """Serve one launcher's request: False when it is not one (nothing forked)."""
    conn.settimeout(10)
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
        return False
    fds: list[int] = []
    try:
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        if len(head) != 4 or len(fds) != 3:
            raise ValueError("a request without its size and three streams")
        request = json.loads(_exactly(conn, int.from_bytes(head, "big")))
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return False
    pid = os.fork()
    if pid == 0:  # the runner
        code = 1
        try:
            listener.close()
            _become(request, fds)
            conn.settimeout(None)
            conn.sendall(os.getpid().to_bytes(4, "big"))
            code = _run()
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(code.to_bytes(4, "big"))
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
                sys.stderr.flush()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    return True


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """Take over the launcher's streams, folder, environment and arguments."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(0)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(request["argv"])
    # As ``python -m`` would have it: the folder first, then PYTHONPATH's entries.
    extra = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and e not in sys.path]
    sys.path[0:1] = [os.getcwd(), *extra]
    if "random" in sys.modules:
        sys.modules["random"].seed()


def _run() -> int:
    """The runner's exit status, as its own process would end with it (pyspark's runner
    ends with ``sys.exit(-1)`` where it fails: 255)."""
    from deltamv.source_runner import main as runner

    try:
        runner()
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        return code & 0xFF if isinstance(code, int) else 1
    return 0


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = conn.recv(min(size, 1 << 16))
        if not chunk:
            raise ValueError("the request ended early")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with_parent(signum: int) -> None:
    """Ask Linux for ``signum`` when the parent ends (0: no longer); elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


if __name__ == "__main__":
    main(sys.argv[1:])
