"""``--add-scram`` of ``tiercel storage format``: SCRAM users written into the bootstrap
metadata, so they exist before any client can log in (Kafka's ``ScramParser``, with its
syntax and messages).

    MECHANISM=[name=NAME,password=PASSWORD]
    MECHANISM=[name=NAME,iterations=N,salt="BASE64",saltedpassword="BASE64"]

Components are split on commas; a value in double quotes loses them; iterations default
to 4096 and must be within the mechanism's bounds (4096..16384); without a salt a random
one is made; a salted password needs its salt. Each argument becomes a
UserScramCredentialRecord with StoredKey and ServerKey (never the password). Pure; any
thread.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import UserScramCredentialRecord
from tiercel.protocol.sasl.scram_formatter import (
    MAX_ITERATIONS,
    ScramMechanism,
    secure_random_string,
)

__all__ = ["ScramParserError", "parse_scram_arguments"]

_DEFAULT_ITERATIONS = 4096


class ScramParserError(ValueError):
    """An --add-scram argument refused (Kafka's FormatterException from ScramParser)."""


def parse_scram_arguments(arguments: Sequence[str]) -> list[ApiMessageAndVersion]:
    return [ApiMessageAndVersion(_record(argument), 0) for argument in arguments]


def _record(argument: str) -> UserScramCredentialRecord:
    mechanism, config = _per_mechanism_argument(argument)
    components = dict(_component(c) for c in config.split(","))
    name = components.pop("name", None)
    if name is None:
        raise ScramParserError("You must supply 'name' to add-scram")
    salt = _decode(components.pop("salt", None), "Failed to decode given salt: ")
    iterations_text = components.pop("iterations", None)
    try:
        iterations = _DEFAULT_ITERATIONS if iterations_text is None else int(iterations_text)
    except ValueError:
        raise ScramParserError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted_password: bytes | None = None
    if password is None:
        salted_password_text = components.pop("saltedpassword", None)
        if salted_password_text is None:
            raise ScramParserError(
                "You must supply one of 'password' or 'saltedpassword' to add-scram"
            )
        if salt is None:
            raise ScramParserError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted_password = _decode(salted_password_text, "Failed to decode given saltedPassword: ")
    else:
        components.pop("saltedpassword", None)
    if components:
        raise ScramParserError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    mechanism_name = mechanism.name  # Kafka prints the enum constant: SCRAM_SHA_256
    if iterations < mechanism.min_iterations:
        raise ScramParserError(
            f"The 'iterations' value must be >= {mechanism.min_iterations} for add-scram "
            f"using {mechanism_name}"
        )
    if iterations > MAX_ITERATIONS:
        raise ScramParserError(
            f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using "
            f"{mechanism_name}"
        )
    if salt is None:
        salt = secure_random_string().encode()
    if salted_password is None:
        assert password is not None
        salted_password = mechanism.salted_password(password, salt, iterations)
    return mechanism.credential(salt, salted_password, iterations).to_record(name, mechanism.type)


def _per_mechanism_argument(argument: str) -> tuple[ScramMechanism, str]:
    argument = argument.strip()
    mechanism_name, equals, config = argument.partition("=")
    if not equals:
        raise ScramParserError(f"Failed to find equals sign in SCRAM argument '{argument}'")
    mechanism = ScramMechanism.for_mechanism_name(mechanism_name)
    if mechanism is None:
        raise ScramParserError(f"The add-scram mechanism {mechanism_name} is not supported.")
    if not config.startswith("["):
        raise ScramParserError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ScramParserError("Expected configuration string to end with ]")
    return mechanism, config[1:-1]


def _component(component: str) -> tuple[str, str]:
    key, equals, value = component.partition("=")
    if not equals:
        raise ScramParserError(f"No equals sign found in SCRAM component: {component}")
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return key, value


def _decode(text: str | None, message: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ScramParserError(message + text) from None
