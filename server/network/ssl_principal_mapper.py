"""SslPrincipalMapper: a client certificate's subject DN to a user name, by Kafka's rules.

Kafka's `SslPrincipalMapper` (KIP-371): `ssl.principal.mapping.rules` is a comma-separated
list of `DEFAULT` (the DN unchanged) and `RULE:pattern/replacement/[LU]` (when the
pattern matches the whole DN, every match of it in the DN is replaced, Java's
`String.replaceAll`, then lower- or upper-cased); the first rule that applies wins, and
a DN no rule applies to is refused (`NoMatchingRule`). Patterns are Java regexes, which
Python's `re` reads alike for the forms rules use; `$n` in a replacement is group n, with
Kafka's `escapeLiteralBackReferences` reading of too-large numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import ConfigError

__all__ = ["NoMatchingRuleError", "SslPrincipalMapper"]

_RULE_PATTERN: Final = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER: Final = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER: Final = re.compile(_RULE_PATTERN)
_BACK_REFERENCE: Final = re.compile(r"\$(\d+)")


class NoMatchingRuleError(Exception):
    """No rule maps the DN (Kafka's SslPrincipalMapper.NoMatchingRule)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    """DEFAULT when `pattern` is None. Immutable; any thread."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda m: _expand(self.replacement, m, groups), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _expand(replacement: str, match: re.Match[str], groups: int) -> str:
    """Java's Matcher.appendReplacement after Kafka's escapeLiteralBackReferences: `$n`
    is group n, a number beyond the groups loses trailing digits (down to one digit, and a
    reference above the group count stays literal), `\\x` is x."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        ref = _BACK_REFERENCE.match(replacement, i) if char == "$" else None
        if ref is None:
            out.append(char)
            i += 1
            continue
        digits = ref.group(1)
        while int(digits) > groups and len(digits) > 1:
            digits = digits[:-1]
        if int(digits) > groups:
            out.append("$" + digits)
        else:
            out.append(match.group(int(digits)) or "")
        i += 1 + len(digits)
    return "".join(out)


class SslPrincipalMapper:
    """Parsed `ssl.principal.mapping.rules`. Immutable after construction; any thread."""

    __slots__ = ("_rules",)

    def __init__(self, rules: str) -> None:
        self._rules = tuple(_parse(text) for text in _split(rules) if text)

    def get_name(self, distinguished_name: str) -> str:
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"No rules apply to {distinguished_name}")


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip()) if m.group(0)]


def _parse(rule: str) -> _Rule:
    match = _RULE_PARSER.match(rule)
    # The last alternative matches anything, so a rule that is neither DEFAULT nor RULE:
    # leaves an unmatched rest.
    assert match is not None
    if match.end() != len(rule):
        raise ConfigError(
            f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`",
            "ssl.principal.mapping.rules",
        )
    if match.group(1) is not None:
        return _Rule()
    try:
        pattern = re.compile(match.group(2))
    except re.error as e:
        raise ConfigError(
            f"Invalid rule: {rule}: bad pattern ({e})", "ssl.principal.mapping.rules"
        ) from None
    return _Rule(pattern, match.group(4), match.group(6))
