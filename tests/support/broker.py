"""A Tiercel broker process for tests, started the way a user starts one.

``tiercel broker CONFIG --override ...`` in a subprocess with its own data directory;
the listening port is read from the broker's own ``broker_started`` log line, so tests
can ask for port 0 and still run in parallel. Processes are tracked by pid and always
killed at teardown.

Every `BrokerProcess` is also checked for signs of a bug in its log
(`assert_no_unexpected_errors`, run by conftest after every test): what the broker prints
when an exception nobody expected reached a catch-all, and what asyncio prints about a
task or callback that raised. Each check reads only the lines written since the last
one, so the test during which a broker logged the error is the one that fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Final

REPO = Path(__file__).resolve().parents[2]
TIERCEL = Path(sys.executable).with_name("tiercel")
_SLOW_CALLBACK = re.compile(r"Executing <.*> took (\d+\.\d+) seconds")
# The client port: the listener named PLAINTEXT (not a SASL_PLAINTEXT one after it),
# else a SASL_PLAINTEXT listener for a broker without one.
_STARTED = re.compile(r"event=broker_started .*listeners=(?:\S*,)?PLAINTEXT://[^:,\s]+:(\d+)")
_STARTED_SASL = re.compile(r"event=broker_started .*SASL_PLAINTEXT://[^:,\s]+:(\d+)")
# A KRaft node without the broker role serves no client listener: it has started once
# its controller is up (kafka_raft_server's kraft_node_started).
_CONTROLLER_STARTED = re.compile(r"event=kraft_node_started ")
# Printed only on a bug: server/error_mapping.py's unexpected_error (an exception that is
# neither a Kafka error nor an OSError), KafkaApis' request_failed with
# UNKNOWN_SERVER_ERROR (a handler raised), the connection's request_processing_failed,
# the scheduler's background_task_failed; a replica fetcher's replica_fetcher_error (its
# round raised) and replica_partition_failed (a partition's data could not be applied);
# any traceback (the log formatter renders exc_info inline); and asyncio's reports of
# exceptions no one handled.
_SIGNS_OF_A_BUG: Final = re.compile(
    r"event=(?:unexpected_error|request_processing_failed|background_task_failed"
    r"|replica_fetcher_error|replica_partition_failed)\b"
    r"|event=request_failed\b.*\berror=unknown_server_error\b"
    r"|Traceback \(most recent call last\)"
    r"|exception was never retrieved"
    r"|Exception in callback"
    r"|Unhandled (?:error|exception)"
    r"|Fatal (?:read |write )?error on"
    r"|Task was destroyed but it is pending"
)
# Every BrokerProcess of this test session not yet garbage-collected.
_BROKERS: Final[weakref.WeakSet[BrokerProcess]] = weakref.WeakSet()


def unexpected_errors(log: str) -> list[str]:
    """The lines of a broker log that show a bug (see ``_SIGNS_OF_A_BUG``)."""
    return [line for line in log.splitlines() if _SIGNS_OF_A_BUG.search(line)]


def assert_no_unexpected_errors(brokers: Iterable[BrokerProcess] | None = None) -> None:
    """Fail if any of ``brokers`` (default: every one started in this session) logged a
    sign of a bug since the last check."""
    found = [
        f"{broker.log_path}: {line}"
        for broker in list(_BROKERS if brokers is None else brokers)
        for line in broker.new_unexpected_errors()
    ]
    assert not found, "a broker logged an unexpected error:\n" + "\n".join(found)


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        overrides: dict[str, object] | None = None,
        config_file: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.overrides: dict[str, object] = {
            "node.id": 1,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir / "logs"),
            **(overrides or {}),
        }
        self.config_file = config_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log_path = data_dir / "broker.log"
        # Tests run brokers in asyncio debug mode (design.md §2); benchmarks turn it off.
        self.asyncio_debug = True
        # Extra environment of the process (a fault-injecting LD_PRELOAD, say).
        self.env: dict[str, str] = {}
        self._runs = 0
        self._checked_bytes = 0  # how much of the log new_unexpected_errors has read
        _BROKERS.add(self)

    @property
    def bootstrap(self) -> str:
        assert self.port is not None
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return Path(str(self.overrides["log.dirs"]).split(",")[0])

    def command(self) -> list[str]:
        args = [str(TIERCEL), "broker"]
        if self.config_file is not None:
            args.append(str(self.config_file))
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to serve (the voters of a KRaft
        quorum must all be launched before any of them can start)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if self.port is not None:
            # A restart keeps the port, so clients and advertised listeners stay valid
            # (a KRaft node's controller listener has its port from the start).
            # Only the listener the port was read from (_STARTED, else _STARTED_SASL):
            # pinning SASL_PLAINTEXT too would bind one port twice.
            listeners = str(self.overrides.get("listeners", "PLAINTEXT://127.0.0.1:0"))
            name = "PLAINTEXT" if re.search(r"(?:^|,)PLAINTEXT://", listeners) else "SASL_PLAINTEXT"
            self.overrides["listeners"] = re.sub(
                rf"(?:^|(?<=,)){name}://127\.0\.0\.1:0\b",
                f"{name}://127.0.0.1:{self.port}",
                listeners,
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._runs += 1
        # asyncio debug mode: the loop reports any callback that blocks it.
        env = {
            **os.environ,
            **self.env,
            "PYTHONASYNCIODEBUG": "1" if self.asyncio_debug else "",
        }
        with open(self.log_path, "ab") as log:
            log.write(f"---- start #{self._runs} ----\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=log, cwd=self.data_dir, env=env
            )

    @property
    def is_broker(self) -> bool:
        """Whether the node serves clients: every node but a KRaft controller-only one."""
        roles = str(self.overrides.get("process.roles", "broker"))
        return "broker" in roles.split(",")

    def wait_started(self, timeout: float = 30.0) -> BrokerProcess:
        """Wait until the launched node serves, and learn its client port."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self._this_run_log()
            if not self.is_broker:
                if _CONTROLLER_STARTED.search(log):
                    return self
            elif match := _STARTED.search(log) or _STARTED_SASL.search(log):
                self.port = int(match.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"broker did not start in {timeout}s:\n{self.tail()}")

    def _this_run_log(self) -> str:
        text = self.log_path.read_text(errors="replace")
        return text.rsplit(f"---- start #{self._runs} ----", 1)[-1]

    def tail(self, lines: int = 200) -> str:
        # 200: a broker that has served a consumer group leads the 50 partitions of
        # __consumer_offsets, and each logs a line at start-up.
        return "\n".join(self._this_run_log().splitlines()[-lines:])

    def listener_port(self, listener: str) -> int:
        """The port listener ``listener`` bound in the latest run (a port 0 listener binds
        anew at every start), from its ``event=listening`` log line."""
        ports = re.findall(rf"event=listening listener={listener} .*port=(\d+)", self.log_text())
        assert ports, f"{listener} is not listening:\n{self.tail()}"
        return int(ports[-1])

    def listener_address(self, listener: str) -> str:
        """``127.0.0.1:<port>`` of `listener_port`."""
        return f"127.0.0.1:{self.listener_port(listener)}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def new_unexpected_errors(self) -> list[str]:
        """Signs of a bug in the whole lines logged since the previous call."""
        if not self.log_path.exists():
            return []
        with open(self.log_path, "rb") as log:
            log.seek(self._checked_bytes)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._checked_bytes += len(complete)
        return unexpected_errors(complete.decode(errors="replace"))

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def slow_callbacks(self, threshold_s: float) -> list[str]:
        """Loop callbacks asyncio debug mode reported as blocking for >= ``threshold_s``."""
        slow = []
        for line in self.log_text().splitlines():
            match = _SLOW_CALLBACK.search(line)
            if match and float(match.group(1)) >= threshold_s:
                slow.append(line)
        return slow

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
