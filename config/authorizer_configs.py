"""Authorizer definitions: Kafka's `ServerConfigs.AUTHORIZER_CLASS_NAME_CONFIG` and the
two keys its StandardAuthorizer reads (`super.users`, `allow.everyone.if.no.acl.found`).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; `server/authorizer` loads the
class and reads the other two.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType

# fmt: off
AUTHORIZER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("authorizer.class.name", ConfigType.STRING, "", None,
              "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
              "(or kafka.security.authorizer.AclAuthorizer) for ACLs stored in the KRaft "
              "metadata log, module:Class for your own; empty for none."),
    ConfigDef("super.users", ConfigType.STRING, "", None,
              "Principals allowed everything whatever the ACLs, separated by semicolons "
              "(User:admin;User:broker)."),
    ConfigDef("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, False, None,
              "Allow a request on a resource no ACL applies to."),
)
# fmt: on
