"""TLS definitions: Kafka's `SslConfigs` and the SSL keys of `BrokerSecurityConfigs`.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules. Every key may also be given per listener as
`listener.name.<lower-case listener name>.<key>` (`listener_ssl_config`). Defaults are
Kafka's, including the JKS store types: a store in JKS is refused when it is used (Python
cannot read Java key stores), so a user carrying a Kafka config over learns to convert it.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, list_of, one_of

_S = ConfigType.STRING
_P = ConfigType.PASSWORD
_LIST = ConfigType.LIST

_PROTOCOLS: Final = ("TLSv1.2", "TLSv1.3")
STORE_TYPES: Final = ("JKS", "PKCS12", "PEM")

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
SSL_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("ssl.protocol", _S, "TLSv1.3", one_of("TLS", *_PROTOCOLS),
              "The SSLContext protocol (Kafka's): TLSv1.2 caps connections at TLS 1.2; "
              "TLS or TLSv1.3 leaves the versions to ssl.enabled.protocols."),
    ConfigDef("ssl.enabled.protocols", _LIST, _PROTOCOLS, list_of(one_of(*_PROTOCOLS)),
              "TLS versions accepted on SSL listeners and used for outgoing connections."),
    ConfigDef("ssl.cipher.suites", _LIST, (), None,
              "OpenSSL cipher names for TLS 1.2 (TLS 1.3 suites are always enabled); empty "
              "keeps Python's defaults."),
    ConfigDef("ssl.keystore.type", _S, "JKS", one_of(*STORE_TYPES),
              "Format of the key store: PEM or PKCS12 (JKS cannot be read by Tiercel)."),
    ConfigDef("ssl.keystore.location", _S, None, None,
              "File holding the broker's private key and certificate chain."),
    ConfigDef("ssl.keystore.password", _P, None, None,
              "Password of a PKCS12 key store (not used with PEM)."),
    ConfigDef("ssl.key.password", _P, None, None,
              "Password of the private key (an encrypted PEM key, or a PKCS12 key)."),
    ConfigDef("ssl.keystore.key", _P, None, None,
              "The private key inline, PEM (KIP-651), with ssl.keystore.certificate.chain."),
    ConfigDef("ssl.keystore.certificate.chain", _P, None, None,
              "The certificate chain inline, PEM (KIP-651), with ssl.keystore.key."),
    ConfigDef("ssl.truststore.type", _S, "JKS", one_of(*STORE_TYPES),
              "Format of the trust store: PEM or PKCS12 (JKS cannot be read by Tiercel)."),
    ConfigDef("ssl.truststore.location", _S, None, None,
              "File holding the certificates of the authorities the broker trusts."),
    ConfigDef("ssl.truststore.password", _P, None, None,
              "Password of a PKCS12 trust store."),
    ConfigDef("ssl.truststore.certificates", _P, None, None,
              "Trusted certificates inline, PEM (KIP-651)."),
    ConfigDef("ssl.client.auth", _S, "none", one_of("required", "requested", "none"),
              "Whether SSL clients must (required) or may (requested) present a certificate."),
    ConfigDef("ssl.endpoint.identification.algorithm", _S, "https", None,
              "With https the broker checks the host name in the certificates of the "
              "brokers it connects to; empty turns the check off."),
    ConfigDef("ssl.principal.mapping.rules", _S, "DEFAULT", None,
              "Rules mapping a client certificate's subject to a user name, as Kafka's "
              "(RULE:pattern/replacement/[LU], ..., DEFAULT)."),
)
# fmt: on
