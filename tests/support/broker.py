"""A Tiercel broker process for tests, started the way a user starts one.

``tiercel broker CONFIG --override ...`` in a subprocess with its own data directory;
the listening port is read from the broker's own ``broker_started`` log line, so tests
can ask for port 0 and still run in parallel. Processes are tracked by pid and always
killed at teardown.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIERCEL = Path(sys.executable).with_name("tiercel")
_SLOW_CALLBACK = re.compile(r"Executing <.*> took (\d+\.\d+) seconds")
_STARTED = re.compile(r"event=broker_started .*listeners=\S*PLAINTEXT://([^:,\s]+):(\d+)")


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
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if self.port is not None:
            # A restart keeps the port, so clients and advertised listeners stay valid.
            self.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _STARTED.search(self._this_run_log())
            if match:
                self.port = int(match.group(2))
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

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

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
