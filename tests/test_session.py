from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from deltamv import warm_runner
from deltamv.delta.spark import CATALOG, EXTENSION, fetched_jars
from deltamv.python_worker import installed_zip, worker_python
from deltamv.session import (
    _delta_conf,
    _driver_java_options,
    _workers_python,
    delta_spark_available,
)
from deltamv.source_runner import RUNNER, hung_up


def test_user_java_options_keep_deltamvs_logging_config() -> None:
    options = _driver_java_options("-XX:NativeMemoryTracking=summary")
    assert options.startswith("-Dlog4j2.configurationFile=file:")
    assert options.endswith(" -XX:NativeMemoryTracking=summary")
    assert _driver_java_options("").startswith("-Dlog4j2.configurationFile=file:")


def test_a_users_own_logging_config_wins() -> None:
    mine = "-Dlog4j2.configurationFile=file:/etc/mine.properties -Xss4m"
    options = _driver_java_options(mine)
    assert options.endswith(mine)
    assert "deltamv/log4j2.properties" not in options


def test_the_session_factory_passes_the_logging_config_to_the_driver(spark: Any) -> None:
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "log4j2.configurationFile=file:" in options
    assert options.split("=file:")[1].split()[0].endswith("deltamv/log4j2.properties")


def test_the_driver_jvm_ignores_sigterm_and_sigint(spark: Any) -> None:
    """A SIGTERM (or Ctrl-C) to a job's process group stops the job through its driver;
    the JVM does not shut itself down under the running query (tests/faults/test_stop.py)."""
    import signal

    pid = spark.sparkContext._gateway.proc.pid
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGTERM - 1)) and ignored & (1 << (signal.SIGINT - 1))


def test_the_session_reads_delta_natively_when_the_jars_are_fetched(
    spark: Any, tmp_path: Path
) -> None:
    if not fetched_jars():
        pytest.skip("no delta-spark jars fetched (`make setup` fetches them)")
    conf = dict(spark.sparkContext.getConf().getAll())
    assert set(conf["spark.jars"].split(",")) >= set(fetched_jars())
    assert EXTENSION in conf["spark.sql.extensions"].split(",")
    assert conf["spark.sql.catalog.spark_catalog"] == CATALOG
    assert delta_spark_available(spark)
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    spark.range(5).write.format("delta").mode("overwrite").save(path)
    assert spark.sql(f"SELECT count(*) FROM delta.`{path}` VERSION AS OF 0").first()[0] == 3
    assert spark.read.format("delta").load(path).count() == 5


def test_a_second_session_in_a_running_jvm_adds_no_jars(spark: Any) -> None:
    # The driver JVM is up: spark.jars could no longer reach its class path. The running
    # session already has Delta's settings where its classes load, so nothing is added.
    extra = _delta_conf({})
    assert "spark.jars" not in extra
    if delta_spark_available(spark):
        assert extra == {}


@pytest.mark.slow
def test_spark_submit_with_the_jars_reads_delta(tmp_path: Path) -> None:
    jars = fetched_jars()
    if not jars:
        pytest.skip("no delta-spark jars fetched (`make setup` fetches them)")
    script = tmp_path / "probe.py"
    script.write_text(
        "from deltamv.session import build_spark, delta_spark_available\n"
        "spark = build_spark()\n"
        "print('DELTA', delta_spark_available(spark),"
        " spark.conf.get('spark.sql.extensions'))\n"
        "spark.stop()\n"
    )
    submit = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    assert submit
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    out = subprocess.run(
        [submit, "--master", "local[1]", "--jars", ",".join(jars), str(script)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"DELTA True {EXTENSION}" in out.stdout, out.stdout[-3000:]


def test_python_workers_import_the_installed_pyspark_compiled(spark: Any) -> None:
    # In a local job the workers start through deltamv's launcher: the zipped copy of
    # the installed pyspark (every module compiled anew in every worker) is off their path.
    assert spark.sparkContext.pythonExec == os.environ["PYSPARK_PYTHON"] == worker_python()

    def where(_: Any) -> Any:
        import pyspark

        yield pyspark.__file__, os.environ.get("PYTHONPATH", "")

    [(module, path)] = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    zipped = installed_zip()
    assert zipped is not None
    assert os.path.realpath(module) == str(Path(zipped).parents[2] / "__init__.py")
    assert zipped not in [os.path.realpath(e) for e in path.split(os.pathsep) if e]


def test_the_launcher_drops_only_the_installed_zip(tmp_path: Path) -> None:
    launcher = worker_python(tmp_path / "cache")
    zipped = installed_zip()
    assert launcher is not None and zipped is not None
    other = "/opt/spark/python/lib/pyspark.zip"
    shown = subprocess.run(
        [launcher, "-c", "import os, sys, pyspark; print(sys.executable, os.environ['PYTHONPATH'])"],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([zipped, str(tmp_path), other])),
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert shown == [sys.executable, os.pathsep.join([str(tmp_path), other])]
    written = Path(launcher).stat()
    assert worker_python(tmp_path / "cache") == launcher  # written once, then reused
    assert Path(launcher).stat().st_ino == written.st_ino
    assert Path(launcher).stat().st_mtime_ns == written.st_mtime_ns


@pytest.mark.parametrize("through", ["launcher", "python"])
def test_the_streaming_source_runner_ends_quietly_when_spark_hangs_up(
    tmp_path: Path, through: str
) -> None:
    """Spark's runner of a Python streaming source, whose socket the JVM closes as the
    query stops: through the launcher, no tracebacks about the closed socket (run as
    Spark runs it without the launcher, three)."""
    launcher = worker_python(tmp_path / "cache")
    assert launcher is not None
    sock_path = str(tmp_path / "worker.sock")
    with _listening(sock_path) as server:
        proc = _start_runner(launcher if through == "launcher" else sys.executable, sock_path)
        conn, _ = _connected(server)  # (the runner's process id read: it is connected)
        conn.close()
        _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    if through == "launcher":
        assert text == "" and proc.returncode == 1, text
    else:
        assert text.count("Traceback") >= 2 and "BrokenPipeError" in text, text


@pytest.mark.parametrize("end", ["hang up", "SIGTERM"])
def test_the_warm_server_forks_the_runner_the_launcher_asks_for(tmp_path: Path, end: str) -> None:
    """The launcher asks the warm server of its parent (standing in for Spark's JVM) for the
    runner: a child of the server, in the launcher's folder, with the launcher's streams
    and environment, ended as a runner Spark started itself ends."""
    launcher, path, server = _warm_server(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    sock_path = str(tmp_path / "worker.sock")
    proc = None
    try:
        with _listening(sock_path) as jvm:
            assert _bound(path)  # (a launcher asking earlier would wait for it)
            proc = _start_runner(launcher, sock_path, cwd=work)
            conn, pid = _connected(jvm)
            with conn:
                runner = psutil.Process(pid)
                assert runner.ppid() == server.pid != proc.pid
                assert runner.cwd() == str(work)
                if end == "SIGTERM":  # as Spark ends a runner: the launcher passes it on
                    proc.terminate()
                    runner.wait(timeout=60)
            _, err = proc.communicate(timeout=60)
        assert err.decode(errors="replace") == "" and proc.returncode == 1
        _, alive = psutil.wait_procs(
            [runner], timeout=60
        )  # (no zombie: the server ignores SIGCHLD)
        assert not alive
        assert server.wait(timeout=60) == 0  # its one fork served, it ends
        assert not os.path.exists(path)
    finally:
        _reap(server, *([proc] if proc else []))


def test_a_forked_runner_that_fails_ends_with_the_status_a_runner_of_its_own_would(
    tmp_path: Path,
) -> None:
    """pyspark's runner ends with ``sys.exit(-1)`` where it fails (here: the "JVM" names
    another Python version): status 255, as for a process of its own. The fork sent -1
    as four unsigned bytes, which raised an OverflowError printed at the job's start (an
    outside run, whose change log was not there yet)."""
    launcher, path, server = _warm_server(tmp_path)
    sock_path = str(tmp_path / "worker.sock")
    proc = None
    try:
        with _listening(sock_path) as jvm:
            assert _bound(path)
            proc = _start_runner(launcher, sock_path)
            conn, _ = _connected(jvm)
            with conn:
                conn.sendall(len(b"0.0").to_bytes(4, "big") + b"0.0")  # its Python version
                _, err = proc.communicate(timeout=60)
        text = err.decode(errors="replace")
        assert proc.returncode == 255, text
        assert "OverflowError" not in text, text
        assert server.wait(timeout=60) == 0
    finally:
        _reap(server, *([proc] if proc else []))


def test_a_signal_before_the_runners_id_is_passed_on_when_it_comes(tmp_path: Path) -> None:
    """Spark may end the launcher while the server forks: the signal waits for the runner's
    process id, then goes to the runner (the launcher does not end alone, its runner left)."""
    launcher = worker_python(tmp_path / "cache")
    assert launcher is not None
    path = warm_runner.socket_path(os.path.dirname(launcher), os.getpid())
    runner = subprocess.Popen(["sleep", "120"])  # standing in for the forked runner
    proc = None
    try:
        with _listening(path) as server:
            proc = _start_runner(launcher, str(tmp_path / "no-jvm.sock"))
            server.settimeout(60)
            asked, _ = server.accept()
            with asked:
                asked.settimeout(60)
                head, fds, _, _ = socket.recv_fds(asked, 4, 3)
                for fd in fds:
                    os.close(fd)
                body = b""
                while len(body) < int.from_bytes(head, "big"):
                    body += asked.recv(1 << 16)
                proc.terminate()  # the request sent, no process id yet
                time.sleep(0.5)
                assert proc.poll() is None  # it waits for the runner
                asked.sendall(runner.pid.to_bytes(4, "big"))
                assert runner.wait(timeout=60) == -15  # then passes SIGTERM on
            _, err = proc.communicate(timeout=60)  # no exit status sent: 1
        assert err.decode(errors="replace") == "" and proc.returncode == 1
    finally:
        os.unlink(path)
        _reap(runner, *([proc] if proc else []))


def test_the_launcher_runs_the_runner_itself_when_the_server_refuses(tmp_path: Path) -> None:
    launcher = worker_python(tmp_path / "cache")
    assert launcher is not None
    path = warm_runner.socket_path(os.path.dirname(launcher), os.getpid())
    sock_path = str(tmp_path / "worker.sock")
    with _listening(path) as refusing, _listening(sock_path) as jvm:
        proc = _start_runner(launcher, sock_path)
        refusing.settimeout(60)
        asked, _ = refusing.accept()
        asked.close()  # a server that ends before it forks
        conn, pid = _connected(jvm)
        with conn:
            assert pid == proc.pid  # the launcher's own process, become the runner
        _, err = proc.communicate(timeout=60)
    assert err.decode(errors="replace") == "" and proc.returncode == 1


def test_a_session_with_a_local_master_gets_a_warm_server(spark: Any) -> None:
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    assert warm_runner.serve(spark)
    path = warm_runner.socket_path(os.path.dirname(spark.sparkContext.pythonExec), jvm)
    assert _bound(path)
    assert warm_runner.serve(spark)
    servers = [p for p in psutil.Process().children() if _serves(p, jvm)]
    assert len(servers) == 1  # one per JVM


def _serves(process: psutil.Process, jvm: int) -> bool:
    """Whether ``process`` is the warm server of ``jvm`` (False for one ended meanwhile)."""
    try:
        command = process.cmdline()
    except psutil.Error:  # (gone, or ended and not yet reaped)
        return False
    return "deltamv.warm_runner" in command and str(jvm) in command


def _reap(*processes: subprocess.Popen[bytes]) -> None:
    """End ``processes`` and wait for them: none is left behind a failed test, as a
    zombie for the next test that lists this process's children."""
    for process in processes:
        process.kill()
        process.wait(timeout=60)


def test_sockets_of_servers_whose_jvm_is_gone_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # (a process id no longer in use, unless reused at once)
    stale, live = (Path(warm_runner.socket_path(str(tmp_path), p)) for p in (gone.pid, os.getpid()))
    other = tmp_path / "runner-notes.txt"
    for path in (stale, live):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
            bound.bind(str(path))  # (the file stays when the socket is closed)
    other.write_text("")
    assert warm_runner.clear_stale(str(tmp_path)) == 1
    assert not stale.exists() and live.exists() and other.exists()


def _warm_server(tmp_path: Path) -> tuple[str, str, subprocess.Popen[bytes]]:
    """A launcher, and a warm server for one fork whose JVM this process stands in for:
    the launcher, the server's socket path and its process."""
    launcher = worker_python(tmp_path / "cache")
    assert launcher is not None
    path = warm_runner.socket_path(os.path.dirname(launcher), os.getpid())
    server = subprocess.Popen(
        [sys.executable, "-m", "deltamv.warm_runner", path, str(os.getpid()), "1"]
    )
    return launcher, path, server


def _start_runner(python: str, sock_path: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Spark's runner of a Python streaming source, started as Spark starts it, to connect
    to ``sock_path`` (standing in for the JVM's socket)."""
    return subprocess.Popen(
        [python, "-m", RUNNER], cwd=cwd,
        env=dict(os.environ, PYTHON_WORKER_FACTORY_SOCK_PATH=sock_path),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@contextlib.contextmanager
def _listening(path: str) -> Iterator[socket.socket]:
    """A Unix socket listening at ``path`` (a JVM's or a warm server's, stood in for)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        yield listener


def _connected(jvm: socket.socket) -> tuple[socket.socket, int]:
    """The runner's connection to ``jvm``, and the process id it sends first."""
    jvm.settimeout(60)
    conn, _ = jvm.accept()
    pid = conn.recv(4)
    assert len(pid) == 4
    return conn, int.from_bytes(pid, "big")


def _bound(path: str) -> bool:
    """Whether a server's socket appears at ``path`` within a minute."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.path.exists(path)


def test_only_a_closed_socket_ends_the_runner_quietly() -> None:
    def raised(error: BaseException, during: BaseException | None) -> BaseException:
        try:
            try:
                if during is not None:
                    raise during
            finally:
                raise error
        except BaseException as caught:
            return caught

    assert hung_up(raised(BrokenPipeError(), EOFError()))
    assert hung_up(ConnectionResetError())
    assert not hung_up(raised(BrokenPipeError(), ValueError("bad version")))
    assert not hung_up(raised(ValueError("bad version"), None))


def test_no_launcher_in_a_folder_others_may_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert worker_python(shared) is None


def test_workers_run_the_users_interpreter_or_the_drivers_one_off_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    other = "/usr/bin/python3"
    assert _workers_python("local[2]", other) is None  # the user's choice is kept
    assert _workers_python("spark://cluster:7077", other) is None
    assert _workers_python("spark://cluster:7077", None) == sys.executable  # no launcher
    assert _workers_python("yarn", sys.executable) == sys.executable
    assert _workers_python(None, None) == sys.executable  # spark-submit's master
    launcher = worker_python()
    assert launcher is not None and launcher != sys.executable
    assert _workers_python("local[2]", None) == launcher
    assert _workers_python("local", sys.executable) == launcher
