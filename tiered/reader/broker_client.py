"""The broker tail's Kafka client: blocking sockets, Metadata, retries with backoff.

What `broker_tail` needs of a Kafka cluster, kept apart from the read functions so that
each stays one concept: Kafka's consumer splits them the same way (NetworkClient and
its Metadata, under the Fetcher and OffsetFetcher that build the requests).

- `BrokerConnection`: one socket to one broker, wrapped in TLS and logged in with
  SASL/PLAIN as `client_security` says, one request in flight, frames encoded and decoded
  by `protocol.client_frames`; ApiVersions is checked first, as Kafka's NetworkClient
  does, so a broker too old for the fixed versions here fails clearly.
- `BrokerCluster`: the bootstrap servers, the brokers and partition leaders the last
  Metadata named, one connection per broker; a connection failure drops the connection
  and every known leader (the broker may be gone).
- `Deadline`: ``timeout_s`` without progress, with Kafka's exponential backoff (100 ms
  doubling to 1 s: retry.backoff.ms / retry.backoff.max.ms, KIP-580).
- `RETRIABLE_ERRORS`: the partition errors Kafka's consumer retries after a metadata
  refresh; `RetriableError` is any failure worth such a retry.

Blocking and thread-confined (a `Deadline` may be cancelled from any thread): it runs in
Spark executors, with no event loop.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tiercel.protocol.client_frames import FrameError, decode_response, encode_request
from tiercel.protocol.errors import ErrorCode
from tiercel.tiered.reader.client_security import PLAINTEXT, ClientSecurity

__all__ = [
    "FETCH",
    "FETCH_MAX_WAIT_MS",
    "LIST_OFFSETS",
    "METADATA",
    "RETRIABLE_ERRORS",
    "BrokerCluster",
    "BrokerConnection",
    "BrokerTailError",
    "Deadline",
    "RetriableError",
]

_API_VERSIONS: Final = (18, 3)
_SASL_HANDSHAKE: Final = (17, 1)
_SASL_AUTHENTICATE: Final = (36, 2)
METADATA: Final = (3, 12)
LIST_OFFSETS: Final = (2, 7)
FETCH: Final = (1, 12)
_APIS_USED: Final = {"Metadata": METADATA, "ListOffsets": LIST_OFFSETS, "Fetch": FETCH}

FETCH_MAX_WAIT_MS: Final = 500  # a fetch at the high watermark waits this long for data
_BACKOFF_S: Final = 0.1
_BACKOFF_MAX_S: Final = 1.0
_SIZE: Final = struct.Struct(">i")
_MAX_RESPONSE_BYTES: Final = 1 << 30  # larger is a corrupt size field, not data
_CLIENT_ID: Final = "tiercel-broker-tail"


# What Kafka's consumer (Fetcher, OffsetFetcher) handles by refreshing metadata and
# trying again: leadership moved or is moving, or the topic is not known here yet.
RETRIABLE_ERRORS: Final = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
    }
)


class BrokerTailError(RuntimeError):
    """A broker-tail request that failed for good, or kept failing for ``timeout_s``."""


class RetriableError(Exception):
    """Worth another try after a metadata refresh and a backoff."""


class Deadline:
    """``timeout_s`` from now (or from the last `reset`), with Kafka's backoff; any
    thread may `cancel` the waits."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._cancelled = threading.Event()
        self.reset()

    def cancel(self) -> None:
        self._cancelled.set()

    def reset(self) -> None:
        self._end = time.monotonic() + self.timeout_s
        self._backoff = _BACKOFF_S

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def backoff(self, error: str) -> None:
        """Sleep before the next try, or raise BrokerTailError with ``error`` when the
        next try would start after the deadline."""
        remaining = self.remaining()
        if remaining <= self._backoff:
            raise BrokerTailError(f"{error} (still failing after {self.timeout_s:g} s)")
        if self._cancelled.wait(self._backoff):
            raise BrokerTailError(f"{error} (the read was abandoned)")
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX_S)


class BrokerConnection:
    """One blocking socket to one broker; requests one at a time, in order."""

    def __init__(
        self, host: str, port: int, timeout_s: float, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.address = f"{host}:{port}"
        self._sock = _connect(host, port, max(timeout_s, 0.1), security)
        self._correlation_id = 0
        try:
            self._check_versions(timeout_s)
            if security.sasl_login is not None:
                self._authenticate(*security.sasl_login, timeout_s)
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def request(self, api: tuple[int, int], body: Mapping[str, Any], timeout_s: float) -> Any:
        api_key, version = api
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        try:
            self._sock.settimeout(max(timeout_s, 0.1))
            frame = encode_request(api_key, version, self._correlation_id, _CLIENT_ID, body)
            self._sock.sendall(b"".join(frame))
            (size,) = _SIZE.unpack(self._receive(_SIZE.size))
            if not 0 < size <= _MAX_RESPONSE_BYTES:
                raise FrameError(f"response size {size}")
            # kio reads read-only buffers only; a view avoids copying a 50 MB response.
            got, response = decode_response(self._receive(size).toreadonly(), api_key, version)
        except OSError as e:
            raise RetriableError(f"broker {self.address}: {type(e).__name__}: {e}") from e
        except FrameError as e:  # not a passing failure: the same bytes would come again
            raise BrokerTailError(f"broker {self.address}: {e}") from e
        if got != self._correlation_id:
            raise RetriableError(
                f"broker {self.address}: correlation id {got}, expected {self._correlation_id}"
            )
        return response

    def _receive(self, size: int) -> memoryview:
        view = memoryview(bytearray(size))
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("connection closed by the broker")
            got += n
        return view

    def _check_versions(self, timeout_s: float) -> None:
        """ApiVersions first, as Kafka's NetworkClient: a broker too old for the fixed
        versions used here gets a clear error instead of a closed connection."""
        response = self.request(
            _API_VERSIONS,
            {"client_software_name": "tiercel-broker-tail", "client_software_version": "1"},
            timeout_s,
        )
        if response.error_code != ErrorCode.none:
            raise BrokerTailError(
                f"broker {self.address}: ApiVersions failed: {response.error_code}"
            )
        supported = {
            int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys
        }
        for name, (api_key, version) in _APIS_USED.items():
            low, high = supported.get(api_key, (0, -1))
            if not low <= version <= high:
                raise BrokerTailError(
                    f"broker {self.address} serves {name} versions {low}-{high}; "
                    f"the broker tail needs version {version}"
                )

    def _authenticate(self, username: str, password: str, timeout_s: float) -> None:
        """SASL/PLAIN as Kafka's SaslClientAuthenticator: SaslHandshake v1 naming the
        mechanism, then the RFC 4616 message (no authorization id) in one
        SaslAuthenticate. A refusal fails the read for good: the same login would be
        refused again (Kafka's SaslAuthenticationException is not retriable)."""
        handshake = self.request(_SASL_HANDSHAKE, {"mechanism": "PLAIN"}, timeout_s)
        if handshake.error_code != ErrorCode.none:
            raise BrokerTailError(
                f"broker {self.address} does not take SASL mechanism PLAIN "
                f"(it takes {', '.join(handshake.mechanisms) or 'none'})"
            )
        token = b"\0" + username.encode() + b"\0" + password.encode()
        answer = self.request(_SASL_AUTHENTICATE, {"auth_bytes": token}, timeout_s)
        if answer.error_code != ErrorCode.none:
            raise BrokerTailError(
                f"broker {self.address}: SASL/PLAIN login as {username} failed: "
                f"{answer.error_message or answer.error_code.name.upper()}"
            )


def _connect(host: str, port: int, timeout_s: float, security: ClientSecurity) -> socket.socket:
    """A connected socket, in TLS when ``security`` says so (the handshake done, the
    broker's certificate and, unless turned off, its host name checked)."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        raise RetriableError(f"broker {host}:{port}: cannot connect ({e})") from e
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    context = security.ssl_context()
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        # Not a passing failure (Kafka's SslAuthenticationException is not retriable).
        sock.close()
        raise BrokerTailError(f"broker {host}:{port}: TLS handshake failed: {e}") from e
    except OSError as e:
        sock.close()
        raise RetriableError(f"broker {host}:{port}: TLS handshake failed ({e})") from e


class BrokerCluster:
    """Bootstrap servers, the brokers and leaders Metadata named, one connection per
    broker. Not thread-safe."""

    def __init__(
        self, bootstrap_servers: str, deadline: Deadline, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self._bootstrap = _parse_servers(bootstrap_servers)
        self.deadline = deadline
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def __enter__(self) -> BrokerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def request(
        self, address: tuple[str, int], api: tuple[int, int], body: Mapping[str, Any]
    ) -> Any:
        """``body`` sent to the broker at ``address``; on a connection failure the
        connection is dropped (and RetriableError raised) so the next try reconnects."""
        timeout_s = self.deadline.remaining() + FETCH_MAX_WAIT_MS / 1000
        try:
            connection = self._connections.get(address)
            if connection is None:
                connection = self._connections[address] = BrokerConnection(
                    *address, timeout_s, self.security
                )
            return connection.request(api, body, timeout_s)
        except RetriableError:
            dropped = self._connections.pop(address, None)
            if dropped is not None:
                dropped.close()
            # The broker may be gone: every leader is looked up again.
            self._leaders.clear()
            raise

    def metadata(self, topics: Sequence[str] | None) -> Any:
        """A Metadata response for ``topics`` (None: all), from a broker already
        connected, or else one known from Metadata, or else a bootstrap server."""
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        candidates = [*self._connections, *self._brokers.values(), *self._bootstrap]
        errors = []
        for address in dict.fromkeys(candidates):
            try:
                response = self.request(address, METADATA, body)
            except RetriableError as e:
                errors.append(str(e))
                continue
            self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code == ErrorCode.none and p.leader_id >= 0:
                        self._leaders[(topic.name, int(p.partition_index))] = int(p.leader_id)
            return response
        raise RetriableError("; ".join(errors))

    def leader(self, topic: str, partition: int) -> tuple[str, int]:
        """The address of the partition's leader, by Metadata when not known yet."""
        key = (topic, partition)
        if key not in self._leaders:
            response = self.metadata([topic])
            for t in response.topics:
                if t.error_code != ErrorCode.none:
                    raise RetriableError(f"topic {topic}: {t.error_code.name.upper()} in Metadata")
            if key not in self._leaders:
                raise RetriableError(f"{topic}-{partition}: no leader in Metadata")
        node = self._leaders[key]
        if node not in self._brokers:
            del self._leaders[key]
            raise RetriableError(f"{topic}-{partition}: leader {node} is not a live broker")
        return self._brokers[node]

    def forget_leader(self, topic: str, partition: int) -> None:
        self._leaders.pop((topic, partition), None)


def _parse_servers(bootstrap_servers: str) -> list[tuple[str, int]]:
    servers = []
    for item in bootstrap_servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BrokerTailError(f"bad bootstrap server {item.strip()!r}: expected host:port")
        servers.append((host.strip("[]"), int(port)))
    return servers
