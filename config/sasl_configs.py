"""SASL definitions: the SASL keys of Kafka's `BrokerSecurityConfigs` and
`SocketServerConfigs` (connection.failed.authentication.delay.ms).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules. A listener's mechanisms and JAAS text are given per
listener as Kafka's (`listener.name.<l>.sasl.enabled.mechanisms`,
`listener.name.<l>.<mechanism, lower case>.sasl.jaas.config`); `sasl_config` resolves
them. Defaults are Kafka's, GSSAPI included: a listener left at GSSAPI is refused with a
message saying what to set, since Tiercel has no Kerberos.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least

_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG
_LIST = ConfigType.LIST

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
SASL_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("sasl.enabled.mechanisms", _LIST, ("GSSAPI",), None,
              "SASL mechanisms a SASL listener accepts; Tiercel serves PLAIN, "
              "SCRAM-SHA-256 and SCRAM-SHA-512 (SCRAM on KRaft nodes) and OAUTHBEARER "
              "(unsecured tokens)."),
    ConfigDef("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI", None,
              "SASL mechanism brokers use between themselves on a SASL inter-broker "
              "listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)."),
    ConfigDef("sasl.server.max.receive.size", _I, 524288, at_least(1),
              "Largest request a SASL connection may send before it has authenticated."),
    ConfigDef("connections.max.reauth.ms", _L, 0, at_least(0),
              "Longest session of a SASL login (KIP-368): a client must re-authenticate "
              "within it or is disconnected at its next request; 0 for no limit but an "
              "OAUTHBEARER token's expiry."),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.url", _S, None, None,
              "Where a broker would fetch the keys that sign OAUTHBEARER tokens; Tiercel "
              "validates unsecured tokens only.",
              unsupported="validating signed OAUTHBEARER tokens with a JWKS endpoint is not "
              "supported yet; Tiercel validates unsecured tokens (Kafka's default "
              "OAuthBearerUnsecuredValidatorCallbackHandler)"),
    ConfigDef("connection.failed.authentication.delay.ms", _I, 100, at_least(0),
              "How long a failed authentication's answer and close are delayed, to slow "
              "password guessing without slowing other clients."),
)
# fmt: on
