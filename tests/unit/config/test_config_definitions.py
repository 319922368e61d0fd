"""Parsing, rendering and validation of single config values, and the definition tables."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.config.config_def import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
    Validator,
    at_least,
    in_range,
    list_of,
    non_empty_distinct,
    one_of,
)
from tiercel.config.config_values import closest, parse_value, render_value
from tiercel.config.kafka_config import BROKER_CONFIGS, broker_synonyms, canonical_broker_name
from tiercel.config.topic_configs import TOPIC_CONFIGS, resolve_topic_default


def _def(t: ConfigType, validator: Validator | None = None) -> ConfigDef:
    return ConfigDef("some.key", t, None, validator, "A key for tests.")


def test_enum_numbers_are_kafkas_wire_values() -> None:
    assert [t.value for t in ConfigType] == list(range(0, 10))
    assert ConfigType(0) is ConfigType.UNKNOWN
    assert {s.name: s.value for s in ConfigSource} == {
        "UNKNOWN": 0,
        "TOPIC_CONFIG": 1,
        "DYNAMIC_BROKER_CONFIG": 2,
        "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
        "STATIC_BROKER_CONFIG": 4,
        "DEFAULT_CONFIG": 5,
        "DYNAMIC_BROKER_LOGGER_CONFIG": 6,
        "CLIENT_METRICS_CONFIG": 7,
        "GROUP_CONFIG": 8,
    }
    assert ConfigType["PASSWORD"].value == 9 and ConfigType["LIST"].value == 7


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), (" FALSE ", False), ("True", True), (True, True), (False, False)],
)
def test_boolean_accepts_true_false_in_any_case(raw: object, expected: bool) -> None:
    assert parse_value(_def(ConfigType.BOOLEAN), raw) is expected


@pytest.mark.parametrize("raw", ["yes", "1", 1, "", None, 0.0])
def test_boolean_rejects_anything_else(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"some\.key.*BOOLEAN \(true or false\)") as e:
        parse_value(_def(ConfigType.BOOLEAN), raw)
    assert e.value.key == "some.key"


@pytest.mark.parametrize(
    ("t", "low", "high"),
    [
        (ConfigType.SHORT, -(2**15), 2**15 - 1),
        (ConfigType.INT, -(2**31), 2**31 - 1),
        (ConfigType.LONG, -(2**63), 2**63 - 1),
    ],
)
def test_integers_are_range_checked_for_their_java_width(
    t: ConfigType, low: int, high: int
) -> None:
    d = _def(t)
    assert parse_value(d, str(high)) == high
    assert parse_value(d, f" {low} ") == low
    assert parse_value(d, high) == high
    for bad in (high + 1, low - 1, str(high + 1)):
        with pytest.raises(ConfigError, match=f"expected {t.name}"):
            parse_value(d, bad)


@pytest.mark.parametrize("raw", ["1.5", "12abc", "", "0x10", "1_000", True, 2.0, [1]])
def test_int_rejects_non_integers(raw: object) -> None:
    with pytest.raises(ConfigError, match="Invalid value"):
        parse_value(_def(ConfigType.INT), raw)


def test_int_accepts_explicit_sign() -> None:
    assert parse_value(_def(ConfigType.INT), "+7") == 7
    assert parse_value(_def(ConfigType.INT), "-7") == -7


@pytest.mark.parametrize(
    ("raw", "expected"), [("0.25", 0.25), (" 1 ", 1.0), (1, 1.0), (0.5, 0.5), ("1e-3", 0.001)]
)
def test_double_parses_numbers(raw: object, expected: float) -> None:
    value = parse_value(_def(ConfigType.DOUBLE), raw)
    assert isinstance(value, float) and value == expected


@pytest.mark.parametrize("raw", ["nan", "inf", "half", "", True, float("nan")])
def test_double_rejects_non_numbers(raw: object) -> None:
    with pytest.raises(ConfigError, match="DOUBLE"):
        parse_value(_def(ConfigType.DOUBLE), raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("compact, delete", ("compact", "delete")),
        ("delete", ("delete",)),
        ("", ()),
        ("  ", ()),
        (["a", " b "], ("a", "b")),
        (("x",), ("x",)),
        ([1, 2], ("1", "2")),
    ],
)
def test_list_splits_on_commas_or_takes_a_yaml_sequence(
    raw: object, expected: tuple[str, ...]
) -> None:
    assert parse_value(_def(ConfigType.LIST), raw) == expected


@pytest.mark.parametrize("raw", ["a,,b", "a,", [["nested"]], [{"k": 1}], [None], 5, [True]])
def test_list_rejects_empty_or_non_scalar_elements(raw: object) -> None:
    with pytest.raises(ConfigError, match="LIST"):
        parse_value(_def(ConfigType.LIST), raw)


def test_string_is_trimmed_and_an_all_digit_yaml_int_keeps_its_text() -> None:
    assert parse_value(_def(ConfigType.STRING), "  CreateTime ") == "CreateTime"
    assert parse_value(_def(ConfigType.STRING), 12345) == "12345"
    for bad in (True, 1.5, ["x"]):
        with pytest.raises(ConfigError, match="STRING"):
            parse_value(_def(ConfigType.STRING), bad)


def test_validators_reject_with_a_sentence() -> None:
    with pytest.raises(ConfigError, match=r"'-1' for configuration some\.key: must be at least 0"):
        parse_value(_def(ConfigType.INT, at_least(0)), "-1")
    with pytest.raises(ConfigError, match="must be between 0 and 1"):
        parse_value(_def(ConfigType.DOUBLE, in_range(0, 1)), "1.5")
    with pytest.raises(ConfigError, match="must be one of CreateTime, LogAppendTime"):
        parse_value(_def(ConfigType.STRING, one_of("CreateTime", "LogAppendTime")), "createtime")
    with pytest.raises(ConfigError, match="element 'purge' must be one of compact, delete"):
        parse_value(_def(ConfigType.LIST, list_of(one_of("compact", "delete"))), "delete,purge")
    with pytest.raises(ConfigError, match="at least one"):
        parse_value(_def(ConfigType.LIST, non_empty_distinct()), "")
    with pytest.raises(ConfigError, match="twice"):
        parse_value(_def(ConfigType.LIST, non_empty_distinct()), "a,b,a")


def test_validator_bounds_are_inclusive() -> None:
    assert parse_value(_def(ConfigType.INT, at_least(14)), "14") == 14
    assert parse_value(_def(ConfigType.DOUBLE, in_range(0, 1)), "0") == 0.0
    assert parse_value(_def(ConfigType.DOUBLE, in_range(0, 1)), "1") == 1.0


def test_parse_value_reports_the_key_as_the_user_spelled_it() -> None:
    with pytest.raises(ConfigError, match=r"broker\.id") as e:
        parse_value(BROKER_CONFIGS["node.id"], "x", "broker.id")
    assert e.value.key == "broker.id"


def test_validator_text_uses_kafkas_notation() -> None:
    assert str(at_least(0)) == "[0,...]"
    assert str(in_range(0, 1)) == "[0,...,1]"
    assert str(one_of("a", "b")) == "[a, b]"


@pytest.mark.parametrize(
    ("t", "value", "text"),
    [
        (ConfigType.BOOLEAN, True, "true"),
        (ConfigType.BOOLEAN, False, "false"),
        (ConfigType.LIST, ("compact", "delete"), "compact,delete"),
        (ConfigType.LIST, (), ""),
        (ConfigType.LONG, LONG_MAX, "9223372036854775807"),
        (ConfigType.DOUBLE, 0.5, "0.5"),
        (ConfigType.DOUBLE, 1.0, "1.0"),
        (ConfigType.DOUBLE, 0.0, "0.0"),
        (ConfigType.DOUBLE, 0.0001, "1.0E-4"),
        (ConfigType.DOUBLE, 1.5e-5, "1.5E-5"),
        (ConfigType.DOUBLE, 12345678.0, "1.2345678E7"),
        (ConfigType.STRING, None, None),
    ],
)
def test_render_matches_kafkas_convert_to_string(t: ConfigType, value: object, text: str) -> None:
    assert render_value(t, value) == text


@settings(max_examples=200)
@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_rendered_doubles_parse_back_exactly(x: float) -> None:
    text = render_value(ConfigType.DOUBLE, x)
    assert text is not None
    assert parse_value(_def(ConfigType.DOUBLE), text) == x


@settings(max_examples=100)
@given(st.lists(st.from_regex(r"[a-z0-9._/-]{1,12}", fullmatch=True), max_size=5))
def test_rendered_lists_parse_back(items: list[str]) -> None:
    text = render_value(ConfigType.LIST, tuple(items))
    assert parse_value(_def(ConfigType.LIST), text) == tuple(items)


@pytest.mark.parametrize("defn", [*BROKER_CONFIGS.values(), *TOPIC_CONFIGS.values()])
def test_every_default_is_typed_and_valid(defn: ConfigDef) -> None:
    if defn.default is None:
        return
    text = render_value(defn.type, defn.default)
    assert parse_value(defn, text) == defn.default
    assert defn.doc.endswith(".") and "\n" not in defn.doc


def test_topic_synonyms_are_broker_keys_in_kafkas_order() -> None:
    assert TOPIC_CONFIGS["retention.ms"].synonyms == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert TOPIC_CONFIGS["segment.ms"].synonyms == ("log.roll.ms", "log.roll.hours")
    assert TOPIC_CONFIGS["segment.jitter.ms"].synonyms == (
        "log.roll.jitter.ms",
        "log.roll.jitter.hours",
    )
    # Kafka's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS (less the throttle lists).
    no_server_default = {"remote.storage.enable", "remote.log.copy.disable",
                         "remote.log.delete.on.disable"}  # fmt: skip
    assert {n for n, d in TOPIC_CONFIGS.items() if not d.synonyms} == no_server_default
    assert TOPIC_CONFIGS["local.retention.ms"].synonyms == ("log.local.retention.ms",)
    assert TOPIC_CONFIGS["local.retention.bytes"].synonyms == ("log.local.retention.bytes",)
    for defn in TOPIC_CONFIGS.values():
        if not defn.synonyms:
            continue
        assert all(s in BROKER_CONFIGS for s in defn.synonyms)
        # DescribeConfigs finds the group from the first synonym, as Kafka does.
        assert broker_synonyms(defn.synonyms[0]) == defn.synonyms
        # The last synonym always has a default, so every topic key has a value.
        assert BROKER_CONFIGS[defn.synonyms[-1]].default is not None


def test_topic_and_broker_defaults_agree() -> None:
    broker_defaults = {name: d.default for name, d in BROKER_CONFIGS.items()}
    for name, defn in TOPIC_CONFIGS.items():
        assert resolve_topic_default(name, broker_defaults) == defn.default, name


def test_broker_synonym_groups() -> None:
    assert broker_synonyms("log.retention.hours") == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert broker_synonyms("log.roll.hours") == ("log.roll.ms", "log.roll.hours")
    assert broker_synonyms("log.flush.interval.ms") == (
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
    )
    assert broker_synonyms("log.flush.scheduler.interval.ms") == (
        "log.flush.scheduler.interval.ms",
    )
    assert broker_synonyms("num.partitions") == ("num.partitions",)


def test_aliases_and_closest() -> None:
    assert canonical_broker_name("broker.id") == "node.id"
    assert canonical_broker_name("log.dir") == "log.dirs"
    assert canonical_broker_name("no.such.key") == "no.such.key"
    assert closest("log.retention.hour", BROKER_CONFIGS) == "log.retention.hours"
    assert closest("zzzz", BROKER_CONFIGS) is None


def test_required_keys_are_defined_with_kafkas_defaults() -> None:
    expected = {
        "num.partitions": 1,
        "log.segment.bytes": 1073741824,
        "log.retention.hours": 168,
        "log.retention.check.interval.ms": 300000,
        "message.max.bytes": 1048588,
        "socket.request.max.bytes": 104857600,
        "offsets.topic.num.partitions": 50,
        "offsets.topic.replication.factor": 3,
        "offsets.retention.minutes": 10080,
        "group.max.session.timeout.ms": 1800000,
        "replica.lag.time.max.ms": 30000,
        "log.cleaner.min.cleanable.ratio": 0.5,
        "log.flush.interval.messages": LONG_MAX,
    }
    assert {k: BROKER_CONFIGS[k].default for k in expected} == expected
    assert BROKER_CONFIGS["offsets.topic.replication.factor"].type is ConfigType.SHORT
    assert len(TOPIC_CONFIGS) == 28
