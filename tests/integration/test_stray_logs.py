"""Logs that no topic owns any more are deleted, never served (Kafka's stray logs).

A topic deleted while a broker is down, or deleted and recreated under the same name,
leaves partition directories behind; at start-up the broker compares them with the
metadata (topic present? same topic id in partition.metadata?) and removes strays.
"""

from __future__ import annotations

import shutil

from support.broker import BrokerProcess
from support.clients import Outgoing, consume, create_topic, produce, wait_until, watermarks


def test_strays_are_deleted_at_startup_and_never_served(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kept", 1)
    create_topic(broker.bootstrap, "reborn", 1)
    produce("confluent", broker.bootstrap, "kept", [Outgoing(0, b"k%d" % i) for i in range(5)])
    assert broker.stop() == 0
    kept = broker.log_dir / "kept-0"
    # A directory of a topic the metadata does not know (deleted while we were down).
    shutil.copytree(kept, broker.log_dir / "ghost-0")
    # The directory of an existing topic holding another topic's data and topic id.
    shutil.rmtree(broker.log_dir / "reborn-0")
    shutil.copytree(kept, broker.log_dir / "reborn-0")

    broker.start()
    assert wait_until(lambda: not any(broker.log_dir.glob("ghost-0*")), 10)
    assert "stray" in broker.log_text()
    assert watermarks(broker.bootstrap, "reborn", 0) == (0, 0)
    assert watermarks(broker.bootstrap, "kept", 0) == (0, 5)
    got = consume("confluent", broker.bootstrap, "kept", 5)
    assert got.values() == [b"k%d" % i for i in range(5)]
