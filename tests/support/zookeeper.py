"""A real ZooKeeper for tests: the Debian package's server, started without root services.

``java -cp <conf dir>:/usr/share/java/zookeeper.jar QuorumPeerMain zoo.cfg`` with a zoo.cfg
of our own: a free 127.0.0.1 port, a temporary dataDir, no admin web server (it would take
port 8080), no per-address connection limit (a cluster test opens many sessions from
127.0.0.1), and a short tickTime so that tests may use short session timeouts (ZooKeeper
grants between 2 and 20 ticks unless min/maxSessionTimeout say otherwise). The process is
tracked by pid: ``stop`` (SIGTERM), ``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/
SIGCONT) and ``restart`` (same port, same data) act on that pid only.

Fixtures: ``zookeeper`` (one server for the whole session), ``zk_connect`` (a connect
string with a chroot unique to the test, so that tests share the server without seeing
each other's nodes) and ``zookeeper_factory`` (private servers for tests that stop or
restart ZooKeeper). They fail the test, saying what to install, when ZooKeeper is missing:
clusters are part of what `make test` checks, and tests/install-services.sh (run by
`make test`) installs it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from support.ports import free_port

ZOOKEEPER_JAR: Final = Path("/usr/share/java/zookeeper.jar")
# slf4j's simple binding sends ZooKeeper's log to stderr, which goes to zookeeper.log.
_SLF4J_SIMPLE: Final = Path("/usr/share/java/slf4j-simple.jar")
JAVA: Final = shutil.which("java")
INSTALLED: Final = JAVA is not None and ZOOKEEPER_JAR.exists()
MISSING: Final = (
    f"ZooKeeper is not installed: need java and {ZOOKEEPER_JAR} "
    "(Debian package `zookeeper`; run `bash tests/install-services.sh`)"
)
TICK_TIME_MS: Final = 250


def four_letter_word(port: int, word: bytes, timeout: float = 2.0) -> bytes:
    """Send a four-letter command (enabled in our zoo.cfg) and return the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    """One standalone ZooKeeper process. Not thread-safe; the test thread drives it."""

    def __init__(self, directory: Path, tick_time_ms: int = TICK_TIME_MS) -> None:
        self.directory = directory
        self.tick_time_ms = tick_time_ms
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect_string(self, chroot: str = "") -> str:
        return self.hosts + chroot

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write_config(self) -> Path:
        conf = self.directory / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (self.directory / "data").mkdir(exist_ok=True)
        (conf / "zoo.cfg").write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.directory / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    f"minSessionTimeout={2 * self.tick_time_ms}",
                    "maxSessionTimeout=60000",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,cons",
                    # Nothing to keep across machines: fsync costs only test time.
                    "forceSync=no",
                    "",
                ]
            )
        )
        return conf

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        assert not self.running, "already running"
        assert JAVA is not None
        conf = self._write_config()
        classpath = [str(conf), str(ZOOKEEPER_JAR)]
        if _SLF4J_SIMPLE.exists():
            classpath.append(str(_SLF4J_SIMPLE))
        command = [
            JAVA,
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-cp",
            ":".join(classpath),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(conf / "zoo.cfg"),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"---- start on port {self.port} ----\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=log, cwd=self.directory, start_new_session=True
            )
        self._wait_serving(timeout)
        return self

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if re.search(rb"^Mode: ", four_letter_word(self.port, b"srvr"), re.M):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"ZooKeeper did not serve within {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait (a clean stop)."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash. Sessions survive it: they are in the data directory."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 30.0) -> ZooKeeperServer:
        self.stop()
        return self.start(timeout)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper shared by the whole test session."""
    if not INSTALLED:
        pytest.fail(MISSING, pytrace=False)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.kill()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """A connect string to the shared ZooKeeper with a chroot of this test's own."""
    if not zookeeper.running:
        # A test that stopped the shared server must not fail the ones after it.
        zookeeper.start()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    return zookeeper.connect_string(f"/tests/{name}-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def zookeeper_factory(tmp_path: Path) -> Iterator[Callable[..., ZooKeeperServer]]:
    """Start private ZooKeeper servers with ``factory()``; each is killed at teardown."""
    if not INSTALLED:
        pytest.fail(MISSING, pytrace=False)
    started: list[ZooKeeperServer] = []

    def factory(tick_time_ms: int = TICK_TIME_MS) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / f"zookeeper{len(started)}", tick_time_ms)
        started.append(server)
        return server.start()

    yield factory
    for server in started:
        server.kill()
