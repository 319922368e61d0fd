"""The broker tail over TLS and SASL: Spark's ``kafka.security.protocol``, ``kafka.ssl.*``
and ``kafka.sasl.*`` options, as Spark's Kafka source passes them to its consumers, reach
a broker whose only client listeners are SSL and SASL_SSL (PLAINTEXT serves the brokers
alone). A query reads the tier and the tail through them; a wrong password or an
untrusted certificate fails the read at once with what went wrong, not after retries.

Needs the Spark data source (tiercel.tiered.spark) and its shared session fixture."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Final

import pytest

pytest.importorskip("tiercel.tiered.spark", reason="the Spark data source is not in this tree")

from pyspark.sql import SparkSession

from support.broker import BrokerProcess
from support.certs import Pki, make_pki
from support.clients import create_topic, produce_numbered, wait_until
from tiercel.tiered.reader import open_object_root, plan_topic
from tiercel.tiered.reader.broker_client import BrokerTailError
from tiercel.tiered.reader.broker_tail import describe_topics, read_broker_range
from tiercel.tiered.reader.client_security import client_security

TOPIC: Final = "secured-tail"
COUNT: Final = 300
_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _jaas(user: str, password: str) -> str:
    return f'{_PLAIN_MODULE} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("secured-tail"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f'{_PLAIN_MODULE} required user_alice="alice-secret";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": pki.broker.keystore_pem,
            "remote.log.storage.system.enable": "true",
            "remote.log.manager.task.interval.ms": 200,
            "log.retention.check.interval.ms": 200,
        },
    )
    broker.start()
    create_topic(
        broker.bootstrap,
        TOPIC,
        1,
        {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1"},
    )
    # Batches of 10 records fit the small segments (a larger batch would be refused).
    produce_numbered(broker.bootstrap, TOPIC, COUNT, config={"batch.num.messages": 10})
    yield broker
    broker.kill()


def _sasl_ssl(pki: Pki, password: str = "alice-secret") -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": _jaas("alice", password),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_pem),
    }


def test_the_tail_is_read_over_sasl_ssl_and_ssl(secured: BrokerProcess, pki: Pki) -> None:
    security = client_security(_sasl_ssl(pki))
    address = secured.listener_address("SASL_SSL")
    assert describe_topics(address, [TOPIC], security=security) == {TOPIC: [0]}
    values = [
        value.as_py()
        for batch in read_broker_range(
            address, TOPIC, 0, COUNT - 10, COUNT - 1, security=security, timeout_s=20
        )
        for value in batch.column("value")
    ]
    assert values == [b"v%d" % i for i in range(COUNT - 10, COUNT)]
    over_ssl = client_security(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(pki.truststore_p12),
            "ssl.truststore.password": "tiercel-test",
        }
    )
    assert describe_topics(secured.listener_address("SSL"), [TOPIC], security=over_ssl) == {
        TOPIC: [0]
    }


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ("wrong password", "SASL/PLAIN login as alice failed: .*Invalid username or password"),
        ("untrusted certificate", "TLS handshake failed: .*certificate verify failed"),
    ],
)
def test_a_refused_login_or_certificate_fails_at_once(
    secured: BrokerProcess, pki: Pki, settings: str, error: str
) -> None:
    properties = _sasl_ssl(pki, "not-her-password")
    if settings == "untrusted certificate":
        properties = {**_sasl_ssl(pki), "ssl.truststore.location": str(pki.other_ca_pem)}
    started = time.monotonic()
    with pytest.raises(BrokerTailError, match=error):
        describe_topics(
            secured.listener_address("SASL_SSL"),
            [TOPIC],
            timeout_s=20,
            security=client_security(properties),
        )
    # Not retried until the deadline: the same login or certificate would fail again.
    assert time.monotonic() - started < 10


def test_spark_reads_tier_and_tail_with_the_kafka_sources_security_options(
    spark: SparkSession, secured: BrokerProcess, pki: Pki
) -> None:
    root = f"file://{secured.log_dir / 'remote-storage'}"
    store = open_object_root(root)

    def tiered() -> int:
        plans = plan_topic(store, TOPIC).partitions
        return plans[0].end_offset or 0 if plans else 0

    assert wait_until(lambda: tiered() >= COUNT // 2, 60, 0.3), tiered()
    reader = (
        spark.read.format("tiercel")
        .option("path", root)
        .option("subscribe", TOPIC)
        .option("kafka.bootstrap.servers", secured.listener_address("SASL_SSL"))
    )
    for key, value in _sasl_ssl(pki).items():
        reader = reader.option(f"kafka.{key}", value)
    rows = reader.load().select("offset", "value").orderBy("offset").collect()
    assert [(r.offset, bytes(r.value)) for r in rows] == [(i, b"v%d" % i) for i in range(COUNT)]
