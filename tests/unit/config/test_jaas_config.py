"""The JAAS parser against the cases of Kafka's JaasContextTest (dynamic `sasl.jaas.config`
values) and the tokenizer rules of java.io.StreamTokenizer that JaasConfig relies on."""

from __future__ import annotations

import re

import pytest

from tiercel.config.jaas_config import (
    CONTROL_FLAGS,
    AppConfigurationEntry,
    JaasConfigError,
    parse_jaas_config,
)


def _one(text: str) -> AppConfigurationEntry:
    (entry,) = parse_jaas_config(text)
    return entry


def _prop(module: str, flag: str, options: dict[str, str]) -> str:
    """JaasContextTest.jaasConfigProp: unquoted option values."""
    return " ".join([module, flag, *(f"{k}={v}" for k, v in options.items())]) + ";"


def test_config_no_options() -> None:
    entry = _one("test.testConfigNoOptions required;")
    assert (entry.login_module_name, entry.control_flag, dict(entry.options)) == (
        "test.testConfigNoOptions",
        "REQUIRED",
        {},
    )


@pytest.mark.parametrize("flag", ["required", "requisite", "sufficient", "optional", "Required"])
def test_control_flag(flag: str) -> None:
    entry = _one(_prop("test.testControlFlag", flag, {"propName": "propValue"}))
    assert entry.control_flag == flag.upper()
    assert entry.control_flag in CONTROL_FLAGS
    assert dict(entry.options) == {"propName": "propValue"}


def test_single_and_multiple_options() -> None:
    options = {f"propName{i}": f"propValue{i}" for i in range(10)}
    entry = _one(_prop("test.testMultipleOptions", "sufficient", options))
    assert dict(entry.options) == options


def test_quoted_option_value() -> None:
    entry = _one(
        'test.testQuotedOptionValue required propName="prop value" '
        'propName2="value1 = 1, value2 = 2";'
    )
    assert dict(entry.options) == {"propName": "prop value", "propName2": "value1 = 1, value2 = 2"}


def test_quoted_option_name() -> None:
    entry = _one('test.testQuotedOptionName required "prop name"=propValue;')
    assert dict(entry.options) == {"prop name": "propValue"}


def test_multiple_login_modules() -> None:
    text = " ".join(
        _prop(f"test.Module{i}", "required", {"index": f"Index{i}", "module": f"Module{i}"})
        for i in range(3)
    )
    entries = parse_jaas_config(text)
    assert [e.login_module_name for e in entries] == [f"test.Module{i}" for i in range(3)]
    assert [dict(e.options) for e in entries] == [
        {"index": f"Index{i}", "module": f"Module{i}"} for i in range(3)
    ]


def test_numeric_option_with_quotes() -> None:
    assert dict(_one('test.testNumericOptionWithQuotes required option1="3";').options) == {
        "option1": "3"
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # JaasContextTest's invalid configurations, with JaasConfig's messages.
        ("  required option1=value1;", "Invalid login module control flag 'option1'"),
        ("test.loginModule option1=value1;", "Invalid login module control flag 'option1'"),
        ("loginModule required option1;", "Value not specified for key 'option1'"),
        (
            "test.testMissingSemicolon required option1=value1",
            "JAAS config entry not terminated by semi-colon",
        ),
        (
            "test.testNumericOptionWithoutQuotes required option1=3;",
            "Value not specified for key 'option1'",
        ),
        (
            "test.testInvalidControlFlag { option1=3;",
            "Login module control flag is not available in the JAAS config",
        ),
        ("", "Login module not specified in JAAS config"),
        ("// only a comment", "Login module not specified in JAAS config"),
        ("test.Module", "Login module control flag not specified in JAAS config"),
    ],
)
def test_invalid_configurations(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError, match=re.escape(message)):
        parse_jaas_config(text)


def test_kafkas_plain_example_with_comments_escapes_and_single_quotes() -> None:
    entry = _one(
        "/* the broker's users */ org.apache.kafka.common.security.plain.PlainLoginModule\n"
        "  required // one a line\n"
        '  username="admin" password="admin-secret"\n'
        '  user_alice=\'alice \\"quoted\\"\' user_$bob-2="tab\\there\\101";'
    )
    assert entry.login_module_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert dict(entry.options) == {
        "username": "admin",
        "password": "admin-secret",
        "user_alice": 'alice "quoted"',
        "user_$bob-2": "tab\thereA",
    }


def test_entry_repr_hides_option_values() -> None:
    entry = _one('m required password="hunter2";')
    assert "hunter2" not in repr(entry)
