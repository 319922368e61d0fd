"""ssl.SSLContext for an SSL listener (server side) and for connections to a broker's SSL
listener (client side: another broker, a controller, or the Spark source's broker tail),
from one SslConfig. Below the server and the tiered layers, as Kafka's SslFactory is in
its common library, used by clients and brokers alike.

Kafka's `SslFactory` / `DefaultSslEngineFactory`: key store and trust store loaded once,
when the listener starts (`createSSLContext`); `ssl.client.auth` decides whether a client
must (required) or may (requested) present a certificate; `ssl.enabled.protocols` bounds
the TLS versions; `ssl.endpoint.identification.algorithm=https` turns on host name
checking for outgoing connections (`createSslEngine` in client mode). Stores:

- PEM (KIP-651): `ssl.keystore.location` is a file holding the private key and its
  chain (the key encrypted with `ssl.key.password`, or not); `ssl.keystore.key` and
  `ssl.keystore.certificate.chain` hold them inline. Trust stores: a file of
  certificates, or `ssl.truststore.certificates` inline.
- PKCS12: read with `cryptography`, key password `ssl.key.password` falling back to the
  store password, as Kafka's `getKey`.

Python's `SSLContext.load_cert_chain` reads only files, so inline and PKCS12 keys reach
it through a temporary file readable only by this user, holding the key encrypted with
a random one-time password and removed as soon as it is read: no key is ever on disk in
the clear.
"""

from __future__ import annotations

import functools
import os
import secrets
import ssl
import tempfile
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.ssl_config import SslConfig

__all__ = ["client_context", "outgoing_context", "server_context"]

_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: Final = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


def server_context(config: SslConfig) -> ssl.SSLContext:
    """The context an SSL listener serves with; ConfigError if a store cannot be read."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, config)
    context.verify_mode = _CLIENT_AUTH[config.client_auth]
    if context.verify_mode != ssl.CERT_NONE:
        _load_truststore(context, config, ssl.Purpose.CLIENT_AUTH)
    return context


def outgoing_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext | None:
    """The context for this node's connections to other nodes' `listener_name` (None
    when that listener is PLAINTEXT): Kafka's client channel for the inter-broker or
    controller listener, configured with that listener's ssl.* keys."""
    ssl_config = config.ssl_config(listener_name)
    return None if ssl_config is None else client_context(ssl_config)


# One context per distinct SslConfig: the stores are read once per process, as Kafka's
# SslFactory builds its SSLContext once per channel builder, not once per connection.
@functools.cache
def client_context(config: SslConfig) -> ssl.SSLContext:
    """The context for this broker's connections to an SSL listener of another node."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure(context, config)
    context.check_hostname = config.endpoint_identification_algorithm.lower() == "https"
    _load_truststore(context, config, ssl.Purpose.SERVER_AUTH)
    return context


def _problem(config: SslConfig, message: str) -> ConfigError:
    return ConfigError(f"Invalid SSL configuration of listener {config.listener_name}: {message}")


def _configure(context: ssl.SSLContext, config: SslConfig) -> None:
    versions = sorted(_VERSIONS[p] for p in config.enabled_protocols)
    if not versions:
        raise _problem(config, "ssl.enabled.protocols is empty")
    context.minimum_version = versions[0]
    # A TLSv1.2 context cannot negotiate 1.3 (Kafka: SSLContext.getInstance(ssl.protocol)).
    top = ssl.TLSVersion.TLSv1_2 if config.protocol == "TLSv1.2" else versions[-1]
    context.maximum_version = min(versions[-1], top)
    if config.cipher_suites:
        try:
            context.set_ciphers(":".join(config.cipher_suites))
        except ssl.SSLError:
            raise _problem(
                config,
                f"no cipher of ssl.cipher.suites {','.join(config.cipher_suites)} is "
                "known to OpenSSL (TLS 1.2 suites go by OpenSSL names)",
            ) from None
    if config.has_keystore:
        _load_keystore(context, config)


def _load_keystore(context: ssl.SSLContext, config: SslConfig) -> None:
    try:
        if config.keystore_key is not None:
            assert config.keystore_certificate_chain is not None
            key = serialization.load_pem_private_key(
                config.keystore_key.encode(), _password(config.key_password)
            )
            _load_key(context, key, config.keystore_certificate_chain.encode())
        elif config.keystore_type == "PEM":
            assert config.keystore_location is not None
            context.load_cert_chain(config.keystore_location, password=config.key_password)
        else:
            assert config.keystore_location is not None
            stored_key, cert, extra = pkcs12.load_key_and_certificates(
                Path(config.keystore_location).read_bytes(),
                _password(config.key_password or config.keystore_password),
            )
            if stored_key is None or cert is None:
                raise ValueError("the store holds no private key with its certificate")
            chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
            _load_key(context, stored_key, chain)
    except (OSError, ValueError, TypeError, ssl.SSLError) as e:
        where = config.keystore_location or "ssl.keystore.key"
        raise _problem(
            config, f"Failed to load SSL keystore {where} of type {config.keystore_type}: {e}"
        ) from None


def _load_key(context: ssl.SSLContext, key: PrivateKeyTypes, chain_pem: bytes) -> None:
    """load_cert_chain from a key object: through a private temporary file, the key
    encrypted with a one-time password."""
    once = secrets.token_bytes(32)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once),
    )
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem + chain_pem)
        context.load_cert_chain(path, password=once)
    finally:
        os.unlink(path)


def _load_truststore(context: ssl.SSLContext, config: SslConfig, purpose: ssl.Purpose) -> None:
    """The trust store, or the system's authorities without one (as Kafka falls back to
    the JVM's default trust store)."""
    try:
        if config.truststore_certificates is not None:
            context.load_verify_locations(cadata=config.truststore_certificates)
        elif config.truststore_location is None:
            context.load_default_certs(purpose)
        elif config.truststore_type == "PEM":
            context.load_verify_locations(cafile=config.truststore_location)
        else:
            store = pkcs12.load_pkcs12(
                Path(config.truststore_location).read_bytes(),
                _password(config.truststore_password),
            )
            certs = [c for c in (store.cert, *store.additional_certs) if c is not None]
            if not certs:
                raise ValueError("At least one certificate expected, but none found")
            context.load_verify_locations(
                cadata="".join(
                    c.certificate.public_bytes(serialization.Encoding.PEM).decode() for c in certs
                )
            )
    except (OSError, ValueError, TypeError, ssl.SSLError) as e:
        where = config.truststore_location or "ssl.truststore.certificates"
        raise _problem(
            config, f"Failed to load SSL truststore {where} of type {config.truststore_type}: {e}"
        ) from None


def _password(text: str | None) -> bytes | None:
    return None if text is None else text.encode()
