"""The checks of a KRaft node's configuration that relate several keys, as Kafka's
`KafkaConfig.validateValues` makes them for each `process.roles`, and the parsed quorum
voters (Kafka's `QuorumConfig.parseVoterConnections`).

- Every KRaft node: `controller.quorum.voters` (a static quorum) or
  `controller.quorum.bootstrap.servers` (KIP-853: the voters are in the metadata log)
  names the quorum; `controller.listener.names` is not empty.
- A controller (alone or combined): its node id is a voter (with static voters); every
  controller listener name is one of its `listeners`, and at least one is there.
- A controller alone: `listeners` holds controller listeners only.
- A broker alone: its node id is not a voter; no controller listener is among its
  `listeners`, and each controller listener has a security protocol.
- Without `process.roles`: `controller.listener.names` is empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import ConfigError

__all__ = ["QuorumVoter", "check_kraft", "parse_bootstrap_servers", "parse_voters"]

# Kafka's QuorumConfig: id@host:port, the host possibly a bracketed IPv6 address.
_VOTER: Final = re.compile(r"(-?[0-9]+)@(\[[0-9A-Fa-f:.%A-Za-z]+\]|[0-9A-Za-z\-._]+):([0-9]+)")
_VOTERS_KEY: Final = "controller.quorum.voters"
_BOOTSTRAP_SERVERS_KEY: Final = "controller.quorum.bootstrap.servers"
# Kafka's Utils.getHost/getPort: host:port, the host possibly a bracketed IPv6 address.
_HOST_PORT: Final = re.compile(r"(\[[0-9A-Fa-f:.%A-Za-z]+\]|[0-9A-Za-z\-._]+):([0-9]+)")
_CONTROLLER_LISTENERS_KEY: Final = "controller.listener.names"
_ROLES_KEY: Final = "process.roles"


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    """One voter of a static quorum: its node id and the address it serves Raft on."""

    node_id: int
    host: str
    port: int


def parse_voters(entries: Sequence[str]) -> tuple[QuorumVoter, ...]:
    """`controller.quorum.voters` as voters; ConfigError names a malformed entry or a
    node id given twice (Kafka's parseVoterConnections)."""
    voters: list[QuorumVoter] = []
    for entry in entries:
        match = _VOTER.fullmatch(entry.strip())
        if match is None:
            raise ConfigError(
                f"Invalid value {entry!r} for configuration {_VOTERS_KEY}: expected "
                "{id}@{host}:{port}",
                _VOTERS_KEY,
            )
        node_id, host, port = int(match.group(1)), match.group(2).strip("[]"), int(match.group(3))
        if node_id < 0 or port > 65535:
            raise ConfigError(
                f"Invalid value {entry!r} for configuration {_VOTERS_KEY}: the node id must "
                "not be negative and the port at most 65535",
                _VOTERS_KEY,
            )
        if any(v.node_id == node_id for v in voters):
            raise ConfigError(
                f"Configuration {_VOTERS_KEY} names voter {node_id} twice", _VOTERS_KEY
            )
        voters.append(QuorumVoter(node_id, host, port))
    return tuple(voters)


def parse_bootstrap_servers(entries: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """`controller.quorum.bootstrap.servers` as (host, port) pairs; ConfigError names a
    malformed entry with Kafka's message (QuorumConfig.parseBootstrapServer)."""
    servers: list[tuple[str, int]] = []
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry.strip())
        if match is None or int(match.group(2)) > 65535:
            raise ConfigError(
                f"Failed to parse host name from {entry} for the configuration "
                f'{_BOOTSTRAP_SERVERS_KEY}. Each entry should be in the form "{{host}}:{{port}}"',
                _BOOTSTRAP_SERVERS_KEY,
            )
        servers.append((match.group(1).strip("[]"), int(match.group(2))))
    return tuple(servers)


def check_kraft(
    values: Mapping[str, object],
    listener_names: Sequence[str],
    protocols: Mapping[str, str],
) -> None:
    """Raise ConfigError if the KRaft keys do not fit together and with the listeners
    (upper-case names, in order); see the module docstring for the rules."""
    roles = _strings(values, _ROLES_KEY)
    controller_names = [n.upper() for n in _strings(values, _CONTROLLER_LISTENERS_KEY)]
    if not roles:
        if controller_names:
            raise ConfigError(
                f"{_CONTROLLER_LISTENERS_KEY} must be empty when not running in KRaft mode "
                f"(without {_ROLES_KEY})",
                _CONTROLLER_LISTENERS_KEY,
            )
        return
    if len(set(roles)) != len(roles):
        raise ConfigError(f"Configuration {_ROLES_KEY} names a role twice", _ROLES_KEY)
    voter_ids = {v.node_id for v in parse_voters(_strings(values, _VOTERS_KEY))}
    bootstrap_servers = parse_bootstrap_servers(_strings(values, _BOOTSTRAP_SERVERS_KEY))
    if not voter_ids and not bootstrap_servers:
        # Kafka's KafkaConfig.validateQuorumVotersAndQuorumBootstrapServerForKRaft.
        raise ConfigError(
            f"If using {_ROLES_KEY}, either {_BOOTSTRAP_SERVERS_KEY} must contain the set of "
            f"bootstrap controllers or {_VOTERS_KEY} must contain a parseable set of "
            "controllers.",
            _VOTERS_KEY,
        )
    if not controller_names:
        raise ConfigError(
            f"{_CONTROLLER_LISTENERS_KEY} must contain at least one value in KRaft mode",
            _CONTROLLER_LISTENERS_KEY,
        )
    node_id = values["node.id"]
    assert isinstance(node_id, int)
    in_listeners = [n for n in controller_names if n in listener_names]
    if "controller" in roles:
        _check_controller(roles, node_id, voter_ids, controller_names, in_listeners, listener_names)
    else:
        _check_broker_only(node_id, voter_ids, controller_names, in_listeners, protocols)
    if "broker" in roles and len(in_listeners) == len(listener_names):
        raise ConfigError(
            "There must be at least one broker listener. Perhaps all listeners appear in "
            f"{_CONTROLLER_LISTENERS_KEY}?",
            "listeners",
        )


def _check_controller(
    roles: Sequence[str],
    node_id: int,
    voter_ids: set[int],
    controller_names: Sequence[str],
    in_listeners: Sequence[str],
    listener_names: Sequence[str],
) -> None:
    # Without static voters the node's place in the quorum is the metadata log's.
    if voter_ids and node_id not in voter_ids:
        raise ConfigError(
            f"If {_ROLES_KEY} contains the 'controller' role, the node id {node_id} "
            f"must be included in the set of voters {_VOTERS_KEY}={sorted(voter_ids)}",
            _VOTERS_KEY,
        )
    if len(in_listeners) != len(controller_names):
        raise ConfigError(
            f"{_CONTROLLER_LISTENERS_KEY} must only contain values appearing in the "
            "'listeners' configuration when running the KRaft controller role",
            _CONTROLLER_LISTENERS_KEY,
        )
    if list(roles) == ["controller"] and len(in_listeners) != len(listener_names):
        raise ConfigError(
            "The listeners config must only contain KRaft controller listeners from "
            f"{_CONTROLLER_LISTENERS_KEY} when {_ROLES_KEY}=controller",
            "listeners",
        )


def _check_broker_only(
    node_id: int,
    voter_ids: set[int],
    controller_names: Sequence[str],
    in_listeners: Sequence[str],
    protocols: Mapping[str, str],
) -> None:
    if node_id in voter_ids:
        raise ConfigError(
            f"If {_ROLES_KEY} contains just the 'broker' role, the node id {node_id} "
            f"must not be included in the set of voters {_VOTERS_KEY}={sorted(voter_ids)}",
            _VOTERS_KEY,
        )
    if in_listeners:
        raise ConfigError(
            f"{_CONTROLLER_LISTENERS_KEY} must not contain a value appearing in the "
            "'listeners' configuration when running KRaft with just the broker role",
            _CONTROLLER_LISTENERS_KEY,
        )
    for name in controller_names:
        if name not in protocols:
            raise ConfigError(
                f"Controller listener with name {name} defined in "
                f"{_CONTROLLER_LISTENERS_KEY} not found in listener.security.protocol.map",
                _CONTROLLER_LISTENERS_KEY,
            )


def _strings(values: Mapping[str, object], key: str) -> list[str]:
    value = values[key]
    assert isinstance(value, tuple)
    return [str(item) for item in value]
