"""Parsing and rendering of config values, as Kafka's `ConfigDef.parseType` and
`ConfigDef.convertToString`.

Strings are trimmed, booleans are "true"/"false" in any case, lists are comma-separated,
and integers are range-checked for their Java width. Values are also accepted as YAML
scalars (and YAML sequences for lists).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigError, ConfigType

__all__ = ["closest", "parse_value", "render_value"]

_INT_BOUNDS: Final = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_DECIMAL: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _expected(t: ConfigType) -> str:
    if t in _INT_BOUNDS:
        low, high = _INT_BOUNDS[t]
        return f"{t.name} (a whole number from {low} to {high})"
    return {
        ConfigType.BOOLEAN: "BOOLEAN (true or false)",
        ConfigType.DOUBLE: "DOUBLE (a decimal number)",
        ConfigType.LIST: "LIST (comma-separated values or a YAML list)",
        ConfigType.CLASS: "CLASS (a class name)",
    }.get(t, f"{t.name} (a string)")


def parse_value(defn: ConfigDef, raw: object, key: str | None = None) -> object:
    """`raw` (a string, YAML scalar or YAML list) converted to `defn`'s type and validated.

    ConfigError names the key (`key` when the user spelled it differently, e.g. an alias),
    the value as given and what was expected, or says that Tiercel supports only the
    default of an `unsupported` key.
    """
    key = key or defn.name
    try:
        value = _convert(defn.type, raw)
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw!r} for configuration {key}: expected {_expected(defn.type)}",
            key,
        ) from None
    if defn.validator is not None:
        try:
            defn.validator(value)
        except ValueError as e:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {e}", key) from None
    if defn.unsupported and value != defn.default:
        raise ConfigError(
            f"{key}={render_value(defn.type, value)} is not supported by Tiercel: "
            f"{defn.unsupported}",
            key,
        )
    return value


def _convert(t: ConfigType, raw: object) -> object:
    if t is ConfigType.BOOLEAN:
        return _to_bool(raw)
    if t in _INT_BOUNDS:
        return _to_int(t, raw)
    if t is ConfigType.DOUBLE:
        return _to_double(raw)
    if t is ConfigType.LIST:
        return _to_list(raw)
    if isinstance(raw, str):
        return raw.strip()
    # YAML reads an all-digit string (a cluster id, say) as an int; keep its text.
    if t is ConfigType.STRING and isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    raise ValueError


def _to_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError


def _to_int(t: ConfigType, raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise ValueError
    low, high = _INT_BOUNDS[t]
    if not low <= value <= high:
        raise ValueError
    return value


def _to_double(raw: object) -> float:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and _DECIMAL.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise ValueError
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError
    return value


def _to_list(raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        text = raw.strip()
        items: Sequence[object] = re.split(r"\s*,\s*", text) if text else []
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        raise ValueError
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ValueError
        text = str(item).strip()
        if not text:
            raise ValueError
        out.append(text)
    return tuple(out)


def render_value(t: ConfigType, value: object) -> str | None:
    """Kafka's `ConfigDef.convertToString`: the text DescribeConfigs reports for a value."""
    if value is None:
        return None
    if t is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if t is ConfigType.LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if t is ConfigType.DOUBLE:
        assert isinstance(value, float)
        return _java_double(value)
    return str(value)


def _java_double(x: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7, otherwise d.dddE±n."""
    if x == 0.0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(text) + exponent - 1}"


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The valid key a mistyped `name` most likely meant, if any is close enough."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None
