"""The interpreter Spark starts its Python workers with, in a local job.

Spark puts ``<SPARK_HOME>/python/lib/pyspark.zip`` first on its Python workers'
``PYTHONPATH``. Python cannot cache bytecode for modules in a zip, so every worker
process compiles each pyspark module it imports anew. The streaming source's runner is
a fresh process at each start of the streaming query: about 0.5 s of the start here,
0.3 s of it compiling.

With a pip-installed pyspark, ``SPARK_HOME`` is the package itself, and the zip holds
the very modules the package has installed, compiled, beside it. :func:`worker_python`
writes a small launcher that drops exactly that zip from ``PYTHONPATH`` and then runs
this interpreter: the workers import the same pyspark, compiled. A zip of another Spark
install (``SPARK_HOME`` elsewhere) is another path, and stays. The launcher also runs the
streaming source's runner through :mod:`deltamv.source_runner`, which ends it quietly
when the JVM hangs up on it.
:func:`deltamv.session.build_spark` uses the launcher as ``PYSPARK_PYTHON`` for local
masters, unless ``PYSPARK_PYTHON`` names another interpreter than the driver's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

from deltamv.source_runner import RUNNER

log = logging.getLogger("deltamv.session")

LAUNCHER_PREFIX = "python-worker-"  # the launcher's file name, before its hash
# A warm server's socket in the launcher's folder, by its JVM's process id (the
# launcher's parent; deltamv/warm_runner.py).
RUNNER_SOCKET = "runner-%d.sock"

_LAUNCHER = """#!{python} -S
# deltamv's launcher of Spark's Python workers: {python} without {zip} on PYTHONPATH
# (deltamv/python_worker.py says why). Written by deltamv, again at a start if missing.
import os, signal, sys
entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
os.environ["PYTHONPATH"] = os.pathsep.join(e for e in entries if os.path.realpath(e) != {zip!r})


def forked():
    # The runner forked by the warm server of this JVM, if one runs (deltamv/warm_runner.py):
    # returns only when none was forked, and the runner is to run here.
    import json, socket
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), {socket!r} % os.getppid())
    body = json.dumps(dict(argv=["-m"], cwd=os.getcwd(), env=dict(os.environ))).encode()
    # Signals are passed on to the runner from before it is asked for: one that comes
    # before its process id waits for it (the runner may be connected to Spark already).
    runner, pending = [], []
    def forward(signum, _):
        if runner:
            kill(runner[0], signum)
        else:
            pending.append(signum)
    before = dict((signum, signal.signal(signum, forward)) for signum in SIGNALS)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2)
        sock.connect(path)
        socket.send_fds(sock, [len(body).to_bytes(4, "big")], [0, 1, 2])
        sock.settimeout(None)  # sent whole, the request is served: no timeout from here
        sock.sendall(body)
        pid = number(sock)
    except OSError:
        pid = None
    if pid is None:
        sock.close()
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in pending:  # (asked to end before any runner ran: it ends, as asked)
            if before[signum] != signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
        return
    runner.append(pid)
    for signum in pending:
        kill(pid, signum)
    status = number(sock)
    os._exit(1 if status is None else status)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # (Spark's end of a worker, a user's)


def number(sock):
    data = b""
    while len(data) < 4:
        try:
            chunk = sock.recv(4 - len(data))
        except OSError:
            chunk = b""
        if not chunk:
            return None
        data += chunk
    return int.from_bytes(data, "big")


def kill(pid, signum):
    try:
        os.kill(pid, signum)
    except OSError:
        pass


args = sys.argv[1:]
if args == ["-m", {runner!r}]:  # ended quietly when Spark hangs up (deltamv/source_runner.py)
    args = ["-m", "deltamv.source_runner"]
    forked()
os.execv({python!r}, [{python!r}] + args)
"""


def installed_zip() -> str | None:
    """The zip inside the pyspark package this interpreter imports, if it has one."""
    import pyspark

    zipped = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    return os.path.realpath(zipped) if zipped.is_file() else None  # as Spark resolves it


def _cache() -> Path:
    """This user's cache folder for deltamv (not a temporary one: a job running for weeks
    starts workers with the launcher, and temporary files get cleaned away)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltamv"


def worker_python(folder: Path | None = None) -> str | None:
    """The path of the launcher (written into ``folder``, by default this user's cache
    folder), or None when there is no zip to drop, or the launcher cannot be written or
    does not run there (a ``noexec`` mount, an interpreter path ``#!`` cannot hold)."""
    zipped = installed_zip()
    if zipped is None:
        return None
    if len(sys.executable) > 120 or any(c.isspace() for c in sys.executable):
        # Linux cuts a "#!" line at 127 bytes (its "-S" with it) and splits it at spaces.
        log.info("Python workers import pyspark from its zip (no #! line for %s)", sys.executable)
        return None
    text = _LAUNCHER.format(python=sys.executable, zip=zipped, runner=RUNNER, socket=RUNNER_SOCKET)
    try:
        folder = folder or _cache()
    except RuntimeError as error:  # no home folder
        log.info("Python workers import pyspark from its zip (%s)", error)
        return None
    path = folder / f"{LAUNCHER_PREFIX}{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    part = folder / f".{path.name}.{os.getpid()}"  # written, then renamed to ``path``
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o022:
            raise OSError(f"{folder} is not this user's alone")
        if not path.is_file() or path.read_text() != text:
            part.write_text(text)
            part.chmod(stat.S_IRWXU)
            os.replace(part, path)
        ran = subprocess.run(
            [str(path), "-c", "import sys; print(sys.executable)"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if ran.returncode != 0 or ran.stdout.strip() != sys.executable:
            raise OSError(f"{path} does not run: {ran.stderr.strip()[-200:]}")
    except (OSError, subprocess.SubprocessError) as error:
        log.info("Python workers import pyspark from its zip (%s)", error)
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
        return None
    return str(path)
