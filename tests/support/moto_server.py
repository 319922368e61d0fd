"""A real S3 endpoint for tests: moto's server, as a separate process on 127.0.0.1.

``python -m moto.server -H 127.0.0.1 -p PORT`` keeps every bucket in its memory. The
process is tracked by pid: ``stop`` (SIGTERM), ``kill`` (SIGKILL), ``pause``/``resume``
(SIGSTOP/SIGCONT) and ``restart`` (same port, empty) act on that pid only.

Fixtures: ``moto_s3_endpoint`` (the endpoint URL of one server for the whole session),
``aws_test_credentials`` (fake credentials in the environment, and nothing of the
machine's AWS files, so boto3's standard chain resolves without looking further),
``s3_bucket`` (a bucket of the test's own on the shared server) and
``moto_server_factory`` (private servers, for tests that pause or kill S3).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import boto3
import pytest

from support.ports import free_port

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REGION: Final = "us-east-1"


class MotoServer:
    """One moto server process. Not thread-safe; the test thread drives it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "moto.log"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> MotoServer:
        assert not self.running, "already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        with open(self.log_path, "ab") as log:
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
                raise RuntimeError(f"moto exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # it answers
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"moto did not serve within {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: every bucket is lost."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel, never answered."""
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 30.0) -> MotoServer:
        self.stop()
        return self.start(timeout)


@dataclass(frozen=True)
class S3Bucket:
    """A bucket of one test's own."""

    endpoint_url: str
    name: str

    def client(self) -> S3Client:
        """A plain boto3 client on the endpoint, to look behind the code under test."""
        return boto3.session.Session().client(
            "s3", region_name=REGION, endpoint_url=self.endpoint_url
        )


def create_bucket(endpoint_url: str, name: str | None = None) -> S3Bucket:
    bucket = S3Bucket(endpoint_url, name or f"test-{uuid.uuid4().hex[:20]}")
    client = bucket.client()
    client.create_bucket(Bucket=bucket.name)
    client.close()
    return bucket


@pytest.fixture(scope="session")
def moto_s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of a moto S3 server shared by the whole test session."""
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    yield server.endpoint_url
    server.kill()


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto; the machine's AWS files and instance metadata unread."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_bucket(moto_s3_endpoint: str, aws_test_credentials: None) -> S3Bucket:
    """A new, empty bucket on the shared moto server."""
    return create_bucket(moto_s3_endpoint)


@pytest.fixture
def moto_server_factory(
    tmp_path: Path, aws_test_credentials: None
) -> Iterator[Callable[[], MotoServer]]:
    """Start private moto servers with ``factory()``; every one is killed at teardown."""
    started: list[MotoServer] = []

    def factory() -> MotoServer:
        server = MotoServer(tmp_path / f"moto{len(started)}")
        started.append(server)
        return server.start()

    yield factory
    for server in started:
        server.kill()
