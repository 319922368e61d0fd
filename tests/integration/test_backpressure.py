"""Backpressure: a client that pipelines without reading is paused, not buffered.

A connection stops being read once ``queued.max.requests`` frames wait for processing
(or its responses fill the transport's write buffer). The client then finds its own
socket blocking: the broker's memory does not grow with the client's sending, and every
other connection keeps being served.
"""

from __future__ import annotations

import datetime
import socket
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.wire import encode_request

_LONG_POLL = FetchRequest(
    replica_id=i32(-1),
    max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
    min_bytes=i32(1),
    max_bytes=i32(1024),
    isolation_level=i8(0),
    session_id=i32(0),
    session_epoch=i32(-1),
    topics=(
        FetchTopic(
            topic="quiet",
            partitions=(
                FetchPartition(
                    partition=i32(0),
                    current_leader_epoch=i32(-1),
                    fetch_offset=i64(0),
                    last_fetched_epoch=i32(-1),
                    log_start_offset=i64(-1),
                    partition_max_bytes=i32(1024),
                ),
            ),
        ),
    ),
    forgotten_topics_data=(),
    rack_id="",
)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_does_not_read_is_paused(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker: BrokerProcess = broker_factory({"queued.max.requests": 16})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for topic in admin.create_topics([NewTopic("quiet", 1, 1), NewTopic("busy", 1, 1)]).values():
        topic.result(15)
    assert broker.proc is not None
    rss_before = _rss_kib(broker.proc.pid)

    # Each request long-polls an empty partition for 500 ms, so they queue up.
    chunk = b"".join(encode_request(_LONG_POLL, i) for i in range(1000))
    hog = socket.create_connection(("127.0.0.1", broker.port or 0))
    hog.settimeout(2.0)
    sent = 0
    blocked = False
    try:
        while sent < 200 * len(chunk):  # ~20 MB of requests if nobody ever pushed back
            hog.sendall(chunk)
            sent += len(chunk)
    except TimeoutError:
        blocked = True
    assert blocked, f"the broker kept reading: {sent} bytes of requests accepted"

    # Meanwhile another client is served at full speed.
    started = time.monotonic()
    value = uuid.uuid4().bytes
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for _ in range(100):
        producer.produce("busy", value)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "bp", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("busy", 0, 0)])
    got = 0
    while got < 100 and time.monotonic() - started < 20:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.close()
    assert got == 100
    assert time.monotonic() - started < 10

    # What the broker holds for the paused client is bounded, not the ~MBs it was sent.
    assert _rss_kib(broker.proc.pid) - rss_before < 64 * 1024
    hog.close()
    assert broker.running


def test_large_size_prefixes_alone_commit_no_memory(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker: BrokerProcess = broker_factory()
    assert broker.proc is not None
    rss_before = _rss_kib(broker.proc.pid)
    # 200 clients each announce a ~100 MB request (socket.request.max.bytes allows it)
    # and send only its first bytes: the broker must not reserve 20 GB for them.
    hogs = []
    for _ in range(200):
        hog = socket.create_connection(("127.0.0.1", broker.port or 0))
        hog.sendall((100 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x00" * 70000)
        hogs.append(hog)
    time.sleep(1.0)
    grown_mib = (_rss_kib(broker.proc.pid) - rss_before) / 1024
    assert grown_mib < 200, f"RSS grew by {grown_mib:.0f} MiB"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce("after-hogs", b"still served")
    assert producer.flush(15) == 0
    for hog in hogs:
        hog.close()
