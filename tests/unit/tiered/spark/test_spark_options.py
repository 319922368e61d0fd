"""The tiercel format's options: the Kafka source's names and batch rules, any case,
every bad value a clear error naming the option."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from tiercel.tiered.spark.data_source import TiercelDataSource
from tiercel.tiered.spark.options import (
    EARLIEST,
    LATEST,
    OffsetBound,
    TiercelOptionError,
    parse_options,
)

BASE = {"path": "file:///tmp/tier", "subscribe": "t"}


def test_defaults_and_case_insensitive_names() -> None:
    parsed = parse_options({"PATH": "s3://b/p", "SubScribe": " a, b ,", "S3.Region": "eu"})
    assert parsed.path == "s3://b/p"
    assert parsed.subscribe == ("a", "b")
    assert (parsed.s3_region, parsed.s3_endpoint_url) == ("eu", None)
    assert parsed.starting == OffsetBound(EARLIEST)
    assert parsed.ending == OffsetBound(LATEST)
    assert parsed.fail_on_data_loss and not parsed.include_headers
    assert parsed.min_partitions is None and parsed.bootstrap_servers is None
    assert parsed.starting_timestamp_strategy == "error"
    assert not parsed.read_committed


def test_kafka_isolation_level_takes_the_kafka_source_s_values() -> None:
    assert parse_options({**BASE, "kafka.isolation.level": "read_committed"}).read_committed
    assert parse_options({**BASE, "KAFKA.ISOLATION.LEVEL": "Read_Committed"}).read_committed
    assert not parse_options({**BASE, "kafka.isolation.level": "read_uncommitted"}).read_committed


def test_every_option_parsed() -> None:
    parsed = parse_options(
        {
            "path": "file:///x",
            "assign": '{"a":[1,0,1],"b":[2]}',
            "startingOffsets": '{"a":{"0":5,"1":-2},"b":{"2":7}}',
            "endingOffsets": "latest",
            "startingTimestamp": "1000",
            "endingOffsetsByTimestamp": '{"a":{"0":2000}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
            "failOnDataLoss": "False",
            "minPartitions": "8",
            "includeHeaders": "TRUE",
            "kafka.bootstrap.servers": "h1:9092, h2:9093",
            "filterPushdown": "true",
            "s3.endpoint.url": "http://127.0.0.1:5000",
            "paths": "[]",  # Spark's own key for load(p1, p2)
        }
    )
    assert parsed.assign == {"a": (0, 1), "b": (2,)}
    assert parsed.starting == OffsetBound(
        EARLIEST, {("a", 0): 5, ("a", 1): EARLIEST, ("b", 2): 7}, 1000, None
    )
    assert parsed.ending == OffsetBound(LATEST, None, None, {("a", 0): 2000})
    assert parsed.starting_timestamp_strategy == "latest"
    assert not parsed.fail_on_data_loss and parsed.include_headers and parsed.filter_pushdown
    assert parsed.min_partitions == 8
    assert parsed.bootstrap_servers == "h1:9092,h2:9093"
    assert parsed.s3_endpoint_url == "http://127.0.0.1:5000"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "option path is required"),
        ({**BASE, "endingOffset": "latest"}, "unknown option.*endingoffset"),
        ({**BASE, "kafka.groupid": "g"}, "unknown option.*kafka.groupid"),
        ({**BASE, "maxOffsetPerTrigger": "5"}, "unknown option.*maxoffsetpertrigger"),
        ({**BASE, "kafka.isolation.levle": "x"}, "unknown option.*kafka.isolation.levle"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset: not supp"),
        ({**BASE, "kafka.Key.Deserializer": "x"}, "kafka.key.deserializer: not supported"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit: not supp"),
        ({**BASE, "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition: 0 is below 1"),
        ({**BASE, "maxRecordsPerPartition": "lots"}, "maxRecordsPerPartition: 'lots' is not"),
        (
            {**BASE, "kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SASL_SSL"},
            "security options \\(kafka.\\*\\): sasl.mechanism GSSAPI: the broker tail logs in "
            "with PLAIN only",
        ),
        (
            {**BASE, "kafka.bootstrap.servers": "h:1", "kafka.ssl.truststore.type": "PEM"},
            "ssl.truststore.type is set but security.protocol is PLAINTEXT",
        ),
        ({"path": "file:///x"}, "exactly one of subscribe, subscribePattern and assign"),
        ({**BASE, "assign": '{"t":[0]}'}, "exactly one of .* \\(got subscribe, assign\\)"),
        ({**BASE, "subscribe": " , "}, "subscribe: no topic"),
        ({"path": "file:///x", "subscribePattern": "t["}, "subscribePattern 't\\['"),
        ({"path": "file:///x", "assign": "[0]"}, "assign: expected a JSON object"),
        ({"path": "file:///x", "assign": '{"t":[-1]}'}, "assign: topic 't' needs a list"),
        ({"path": "file:///x", "assign": '{"t":'}, "assign: not JSON"),
        ({**BASE, "startingOffsets": "latest"}, "startingOffsets: latest is not allowed"),
        ({**BASE, "endingOffsets": "earliest"}, "endingOffsets: earliest is not allowed"),
        ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, "offset -1 for t-0 is not allowed"),
        ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, "offset -2 for t-0 is not allowed"),
        ({**BASE, "endingOffsets": '{"t":{"0":-3}}'}, "offset -3 for t-0 is not allowed"),
        ({**BASE, "startingOffsets": '{"t":{"x":1}}'}, "partition 'x' maps to 1"),
        ({**BASE, "startingOffsets": '{"t":{"0":1.5}}'}, "partition '0' maps to 1.5"),
        ({**BASE, "startingOffsets": '{"t":[0]}'}, 'expected {"topic"'),
        ({**BASE, "startingTimestamp": "soon"}, "startingTimestamp: 'soon' is not an integer"),
        ({**BASE, "endingTimestamp": "-5"}, "endingTimestamp: -5 is below 0"),
        ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-1}}'}, "timestamp -1 for t-0"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "x"}, "Strategy: 'x' is not"),
        ({**BASE, "failOnDataLoss": "yes"}, "failOnDataLoss: 'yes' is not true or false"),
        ({**BASE, "includeHeaders": "1"}, "includeHeaders: '1' is not true or false"),
        ({**BASE, "minPartitions": "0"}, "minPartitions: 0 is below 1"),
        ({**BASE, "minPartitions": "many"}, "minPartitions: 'many' is not an integer"),
        ({**BASE, "kafka.bootstrap.servers": "host"}, "'host' is not host:port"),
        ({**BASE, "kafka.bootstrap.servers": "h:1,h:99999"}, "'h:99999' is not host:port"),
        ({**BASE, "kafka.isolation.level": "serializable"}, "kafka.isolation.level must be"),
    ],
)
def test_bad_options_are_errors_naming_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(TiercelOptionError, match=message):
        parse_options(options)


# What a batch query switched from format("kafka") may carry: each accepted, none used.
KAFKA_SOURCE_ONLY = {
    "kafka.group.id": "analytics",
    "groupIdPrefix": "spark-job",
    "maxOffsetsPerTrigger": "1000",
    "minOffsetsPerTrigger": "10",
    "maxTriggerDelay": "5m",
    "fetchOffset.numRetries": "5",
    "fetchOffset.retryIntervalMs": "100",
    "kafkaConsumer.pollTimeoutMs": "120000",
    "kafka.client.id": "reporting",
    "kafka.request.timeout.ms": "60000",
    "kafka.max.partition.fetch.bytes": "1048576",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "PLAIN",
    "kafka.ssl.truststore.location": "/etc/ts.jks",
}


def test_kafka_source_options_that_do_not_apply_are_accepted_and_named() -> None:
    """Spark's Kafka source takes these in a batch read (the streaming ones with a
    warning, validateBatchOptions; the consumer settings for its consumers): accepted,
    listed as given, with why, for the reader to log; the read is otherwise the same."""
    parsed = parse_options({**BASE, **KAFKA_SOURCE_ONLY})
    assert [name for name, _ in parsed.not_applying] == sorted(KAFKA_SOURCE_ONLY)
    reasons = dict(parsed.not_applying)
    assert "ignores in batch queries" in reasons["maxOffsetsPerTrigger"]
    assert "no consumer group" in reasons["groupIdPrefix"]
    assert "runs no Kafka consumer" in reasons["kafka.group.id"]
    assert "without kafka.bootstrap.servers" in reasons["kafka.security.protocol"]
    assert dataclasses.replace(parsed, not_applying=()) == parse_options(BASE)


def test_security_options_with_a_broker_are_used_and_java_only_ones_named() -> None:
    """With kafka.bootstrap.servers the broker tail connects as the Kafka source's
    consumers would: the security settings are parsed, and a Java-only one is accepted
    and named, as other consumer settings are."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";'
    )
    parsed = parse_options(
        {
            **BASE,
            "kafka.bootstrap.servers": "h:1",
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": jaas,
            "kafka.sasl.login.refresh.window.factor": "0.8",
        }
    )
    assert parsed.security.protocol == "SASL_PLAINTEXT"
    assert parsed.security.sasl_login == ("alice", "alice-secret")
    assert parsed.security.tls is None
    assert [name for name, _ in parsed.not_applying] == ["kafka.sasl.login.refresh.window.factor"]
    assert "alice-secret" not in repr(parsed)


def test_max_records_per_partition_and_plaintext_with_a_broker_are_used() -> None:
    parsed = parse_options(
        {
            **BASE,
            "MaxRecordsPerPartition": "500",
            "kafka.bootstrap.servers": "h:1",
            "kafka.security.protocol": "plaintext",
        }
    )
    assert parsed.max_records_per_partition == 500
    assert parsed.not_applying == ()
    assert parse_options(BASE).max_records_per_partition is None


def test_the_reader_logs_each_option_that_does_not_apply(caplog: pytest.LogCaptureFixture) -> None:
    """Once a query (`reader`), as Spark's Kafka source logs the options it ignores."""
    source = TiercelDataSource({**BASE, "kafka.group.id": "g", "maxTriggerDelay": "1m"})
    with caplog.at_level(logging.WARNING, logger="tiercel.tiered.spark"):
        source.reader(source.schema())
    assert [r.getMessage().split(" and ")[0] for r in caplog.records] == [
        "option kafka.group.id does not apply to a tiercel read",
        "option maxTriggerDelay does not apply to a tiercel read",
    ]
