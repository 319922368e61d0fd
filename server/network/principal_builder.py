"""KafkaPrincipal, and the principal of a connection as Kafka's DefaultKafkaPrincipalBuilder
builds it for PLAINTEXT and SSL channels.

PLAINTEXT: `User:ANONYMOUS`. SSL: `User:` + the client certificate's subject DN (RFC 2253,
as Java's `X500Principal.getName()`, most specific attribute first) mapped by the
listener's `ssl.principal.mapping.rules`; `User:ANONYMOUS` when the client sent no
certificate (ssl.client.auth none or requested). The principal is built once, when the
TLS handshake has finished, and kept on the connection for the authorizer.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Final

from cryptography import x509

from tiercel.server.network.ssl_principal_mapper import SslPrincipalMapper

__all__ = ["ANONYMOUS", "KafkaPrincipal", "ssl_principal"]


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's KafkaPrincipal: a type (User) and a name. Immutable; any thread."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


USER_TYPE: Final = "User"
ANONYMOUS: Final = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def ssl_principal(ssl_object: ssl.SSLObject, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """The principal of a finished TLS handshake (DefaultKafkaPrincipalBuilder.build with
    an SslAuthenticationContext). NoMatchingRuleError when no mapping rule applies: Kafka
    fails the authentication, and the caller closes the connection."""
    der = ssl_object.getpeercert(binary_form=True)
    if der is None:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return KafkaPrincipal(USER_TYPE, mapper.get_name(subject))
