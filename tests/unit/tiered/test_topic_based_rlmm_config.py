"""The topic-based RLMM's settings: Kafka's names and defaults."""

import pytest

from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig


def test_kafkas_defaults() -> None:
    config = TopicBasedRemoteLogMetadataManagerConfig.from_props({})
    assert config.topic_num_partitions == 50
    assert config.topic_replication_factor == 3
    assert config.topic_retention_ms == -1
    assert config.consume_wait_ms == 120_000


def test_properties_with_or_without_the_rlmm_prefix() -> None:
    config = TopicBasedRemoteLogMetadataManagerConfig.from_props(
        {
            "remote.log.metadata.topic.num.partitions": "7",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.retention.ms": "86400000",
            "remote.log.metadata.consumer.fetch.max.wait.ms": "100",
            "rlmm.config.remote.log.storage.something.else": "ignored",
        }
    )
    assert config.topic_num_partitions == 7
    assert config.topic_replication_factor == 1
    assert config.topic_retention_ms == 86_400_000
    assert config.fetch_max_wait_ms == 100


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("remote.log.metadata.topic.num.partitions", "0"),
        ("remote.log.metadata.topic.replication.factor", "40000"),
        ("remote.log.metadata.consume.wait.ms", "-1"),
        ("remote.log.metadata.topic.num.partitions", "many"),
    ],
)
def test_bad_values_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        TopicBasedRemoteLogMetadataManagerConfig.from_props({key: value})
