"""SslPrincipalMapper against the cases of Kafka's SslPrincipalMapperTest and the rules
Kafka's security documentation gives as examples."""

from __future__ import annotations

import pytest

from tiercel.config.config_def import ConfigError
from tiercel.server.network.ssl_principal_mapper import NoMatchingRuleError, SslPrincipalMapper


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        "",
        ",   , , ,      , , ,   ",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules_are_refused_at_startup(rules: str) -> None:
    with pytest.raises(ConfigError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_the_first_rule_that_applies_wins() -> None:
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.get_name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.get_name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    dn = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.get_name(dn) == dn


def test_kafka_documentation_examples() -> None:
    # docs/security.html, "Customizing SSL User Name".
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert (
        mapper.get_name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
        == "serviceuser"
    )
    assert (
        mapper.get_name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
        == "adminuser@admin"
    )


def test_escaped_comma_in_a_common_name() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_back_references_beyond_the_groups() -> None:
    # Kafka's escapeLiteralBackReferences: $12 with one group is group 1 then "2"; a
    # single digit above the group count stays literal.
    assert SslPrincipalMapper("RULE:^CN=(\\w+)$/$12/").get_name("CN=a") == "a2"
    assert SslPrincipalMapper("RULE:^CN=(\\w+)$/$1-$3/").get_name("CN=a") == "a-$3"


def test_no_rule_applies() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=x,OU=Other"):
        mapper.get_name("CN=x,OU=Other")
