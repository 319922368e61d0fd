"""SCRAM's mechanisms and key derivation (RFC 5802 §3, RFC 7677), as Kafka's
`ScramMechanism` (the internals one) and `ScramFormatter`.

    SaltedPassword  = Hi(password, salt, i)          (PBKDF2-HMAC with the hash's length)
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    ClientSignature = HMAC(StoredKey, AuthMessage)
    ClientProof     = ClientKey XOR ClientSignature
    ServerSignature = HMAC(ServerKey, AuthMessage)

Only StoredKey, ServerKey, salt and iterations are ever stored (Kafka's ScramCredential,
`scram_credential.ScramCredentialData`); the password and SaltedPassword never leave the
process that made them. Pure functions; any thread. Hi runs hashlib's C PBKDF2, so 4096
iterations cost about a millisecond.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from typing import Final

from tiercel.protocol.sasl.scram_credential import ScramCredentialData

__all__ = [
    "MAX_ITERATIONS",
    "ScramMechanism",
    "generate_credential",
    "sasl_name",
    "secure_random_string",
    "username",
]

# ScramControlManager.MAX_ITERATIONS; the minimum is each mechanism's (4096 for both).
MAX_ITERATIONS: Final = 16384


class ScramMechanism(enum.Enum):
    """(type as the records and KIP-554 carry it, hash name, minimum iterations)."""

    SCRAM_SHA_256 = (1, "sha256", 4096)
    SCRAM_SHA_512 = (2, "sha512", 4096)

    def __init__(self, type_: int, hash_name: str, min_iterations: int) -> None:
        self.type = type_
        self.hash_name = hash_name
        self.min_iterations = min_iterations

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def for_mechanism_name(cls, name: str) -> ScramMechanism | None:
        return _BY_NAME.get(name)

    @classmethod
    def from_type(cls, type_: int) -> ScramMechanism | None:
        """None for Kafka's ScramMechanism.UNKNOWN (any other type)."""
        return _BY_TYPE.get(type_)

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(Normalize(password), salt, i); Kafka's normalize is plain UTF-8 (no SASLprep)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.hash(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")

    def credential(
        self, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredentialData:
        """Kafka's ScramFormatter.generateCredential(salt, saltedPassword, iterations)."""
        return ScramCredentialData(
            salt,
            self.stored_key(self.client_key(salted_password)),
            self.server_key(salted_password),
            iterations,
        )


_BY_NAME: Final = {m.mechanism_name: m for m in ScramMechanism}
_BY_TYPE: Final = {m.type: m for m in ScramMechanism}


def secure_random_string() -> str:
    """A 130-bit random number in base 36, as Kafka's ScramFormatter.secureRandomString
    makes nonces and salts."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while True:
        value, digit = divmod(value, 36)
        out.append(digits[digit])
        if not value:
            return "".join(reversed(out))


def generate_credential(
    mechanism: ScramMechanism, password: str, iterations: int
) -> ScramCredentialData:
    """A credential with a fresh random salt (ScramFormatter.generateCredential)."""
    salt = secure_random_string().encode()
    return mechanism.credential(
        salt, mechanism.salted_password(password, salt, iterations), iterations
    )


def sasl_name(name: str) -> str:
    """RFC 5802's saslname: '=' as '=3D', ',' as '=2C' (ScramFormatter.saslName)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def username(name: str) -> str:
    """The user name of a saslname; ValueError if an '=' is not one of the two escapes
    (ScramFormatter.username)."""
    unescaped = name.replace("=2C", ",")
    if "=" in unescaped.replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return unescaped.replace("=3D", "=")
