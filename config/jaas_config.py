"""The JAAS text of a `sasl.jaas.config` value, parsed as Kafka's `JaasConfig` parses it.

Syntax (one or more entries): ``<login module> <control flag> (<key>=<value>)* ;``, e.g.
``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";``.
Kafka tokenizes with `java.io.StreamTokenizer` as `JaasConfig`'s constructor sets it up:
white space is characters up to U+0020; a word starts with a letter (or ``-``, ``_``,
``$``, a Latin-1 letter or any character past U+00FF) and goes on through letters, digits,
``.``, ``-``, ``_`` and ``$``; a token that starts with a digit, ``.`` or ``-`` followed
by one is a number, which has no text, so ``option=3`` is refused ("Value not specified")
and must be written ``option="3"``; ``"..."`` and ``'...'`` are quoted strings (ending at
the quote or the end of the line, with Java's escapes ``\\n``, ``\\t``, octal ``\\101``
and ``\\X`` for X); ``//`` and a lone ``/`` comment out the rest of the line, ``/* */`` a
block; any other character is a token of its own. The error messages are Kafka's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "AppConfigurationEntry",
    "JaasConfigError",
    "parse_jaas_config",
    "parse_single_login_module",
]

CONTROL_FLAGS: Final = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")
_EXTRA_WORD_CHARS: Final = frozenset("-_$")
_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class JaasConfigError(ValueError):
    """The text is not a valid JAAS configuration; the message is Kafka's."""


@dataclass(frozen=True, slots=True)
class AppConfigurationEntry:
    """One login module entry (javax.security.auth.login.AppConfigurationEntry): the
    module's class name, its control flag (upper case) and its options. Immutable."""

    login_module_name: str
    control_flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        # Options hold passwords (user_<name>, password): never print their values.
        return f"AppConfigurationEntry({self.login_module_name}, {self.control_flag})"


@dataclass(frozen=True, slots=True)
class _Token:
    """A word or quoted string (`text` set), a number (no text), or an ordinary
    character (`char` set, no text), as StreamTokenizer's sval / ttype."""

    text: str | None = None
    char: str | None = None


def _is_word_start(c: str) -> bool:
    code = ord(c)
    return (c.isascii() and c.isalpha()) or c in _EXTRA_WORD_CHARS or code >= 160


def _is_word_part(c: str) -> bool:
    return _is_word_start(c) or (c.isascii() and c.isdigit()) or c == "."


def _is_number_char(c: str) -> bool:
    return (c.isascii() and c.isdigit()) or c == "."


class _Tokenizer:
    """java.io.StreamTokenizer with JaasConfig's settings, over one string."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0

    def _peek(self, offset: int = 0) -> str:
        i = self._pos + offset
        return self._text[i] if i < len(self._text) else ""

    def _skip_to_line_end(self) -> None:
        while self._peek() not in ("", "\n", "\r"):
            self._pos += 1

    def _skip_blanks_and_comments(self) -> None:
        while True:
            c = self._peek()
            if c and ord(c) <= 32:
                self._pos += 1
            elif c == "/" and self._peek(1) == "*":
                end = self._text.find("*/", self._pos + 2)
                self._pos = len(self._text) if end < 0 else end + 2
            elif c == "/":
                self._skip_to_line_end()
            else:
                return

    def tokens(self) -> Iterator[_Token]:
        while True:
            self._skip_blanks_and_comments()
            c = self._peek()
            if not c:
                return
            if c in "\"'":
                yield _Token(text=self._quoted(c))
            elif _is_number_char(c) or (c == "-" and _is_number_char(self._peek(1))):
                self._pos += 1
                while _is_number_char(self._peek()):
                    self._pos += 1
                yield _Token()
            elif _is_word_start(c):
                start = self._pos
                while self._peek() and _is_word_part(self._peek()):
                    self._pos += 1
                yield _Token(text=self._text[start : self._pos])
            else:
                self._pos += 1
                yield _Token(char=c)

    def _quoted(self, quote: str) -> str:
        self._pos += 1
        out: list[str] = []
        while (c := self._peek()) not in ("", quote, "\n", "\r"):
            self._pos += 1
            if c == "\\" and self._peek():
                out.append(self._escape())
            else:
                out.append(c)
        if c == quote:
            self._pos += 1
        return "".join(out)

    def _escape(self) -> str:
        c = self._peek()
        self._pos += 1
        if c in "01234567":
            digits = c
            limit = 3 if c <= "3" else 2
            while len(digits) < limit and self._peek() and self._peek() in "01234567":
                digits += self._peek()
                self._pos += 1
            return chr(int(digits, 8))
        return _ESCAPES.get(c, c)


def parse_jaas_config(text: str) -> tuple[AppConfigurationEntry, ...]:
    """The entries of a JAAS configuration (Kafka's `JaasConfig` constructor)."""
    tokens = _Tokenizer(text).tokens()
    entries: list[AppConfigurationEntry] = []
    for first in tokens:
        entries.append(_entry(first, tokens))
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return tuple(entries)


def parse_single_login_module(text: str) -> AppConfigurationEntry:
    """The one entry a ``sasl.jaas.config`` property may hold (Kafka's JaasContext
    loadServerContext / loadClientContext check), with Kafka's message otherwise."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(
            f"JAAS config property contains {len(entries)} login modules, should be 1 module"
        )
    return entries[0]


def _entry(first: _Token, tokens: Iterator[_Token]) -> AppConfigurationEntry:
    """Kafka's JaasConfig.parseAppConfigurationEntry, from the module name on."""
    module = first.text
    flag_token = next(tokens, None)
    if flag_token is None:
        raise JaasConfigError("Login module control flag not specified in JAAS config")
    flag = _control_flag(flag_token.text)
    options: dict[str, str] = {}
    terminated = False
    for key_token in tokens:
        if key_token.char == ";":
            terminated = True
            break
        key = key_token.text
        equals, value = next(tokens, None), next(tokens, None)
        if equals is None or equals.char != "=" or value is None or value.text is None:
            raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
        options[str(key)] = value.text
    if not terminated:
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    return AppConfigurationEntry(str(module), flag, options)


def _control_flag(flag: str | None) -> str:
    if flag is None:
        raise JaasConfigError("Login module control flag is not available in the JAAS config")
    if flag.upper() not in CONTROL_FLAGS:
        raise JaasConfigError(f"Invalid login module control flag '{flag}' in JAAS config")
    return flag.upper()
