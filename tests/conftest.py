"""Shared fixtures: broker processes, started as users start them, always cleaned up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.broker import BrokerProcess, assert_no_unexpected_errors

# KRaft clusters: cluster, cluster_factory; S3 (moto): moto_s3_endpoint,
# aws_test_credentials, s3_bucket, moto_server_factory; Spark: spark (one session).
pytest_plugins = [
    "support.cluster",
    "support.moto_server",
    "support.spark",
]

LOOP_BLOCKED_S = 1.0


@pytest.fixture(autouse=True)
def _no_unexpected_broker_errors() -> Iterator[None]:
    """Fail the test during which any broker logged a sign of a bug (support.broker).

    Autouse fixtures are set up first, so this check runs after the test's own fixtures
    (broker_factory, cluster_factory) have stopped their brokers."""
    yield
    assert_no_unexpected_errors()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with ``factory(**overrides)``; every one is killed at teardown."""
    started: list[BrokerProcess] = []

    def factory(
        overrides: dict[str, object] | None = None, name: str | None = None, start: bool = True
    ) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / (name or f"broker{len(started)}"), overrides)
        started.append(broker)
        return broker.start() if start else broker

    yield factory
    for broker in started:
        broker.kill()
    # A callback that held the event loop this long stalled every client: that is a bug.
    # (Shorter reports are expected on a loaded 2-core CI machine and only printed.)
    blocked = [line for b in started for line in b.slow_callbacks(LOOP_BLOCKED_S)]
    for line in (line for b in started for line in b.slow_callbacks(0.1)):
        print("slow callback:", line)
    assert not blocked, "event loop blocked:\n" + "\n".join(blocked)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """One running broker with the defaults."""
    return broker_factory()
