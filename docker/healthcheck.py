#!/usr/bin/env python3
"""The broker image's health check: does the broker answer an ApiVersions request?

``tiercel-healthcheck [--ssl-ca CA.pem] [HOST:PORT]`` (default 127.0.0.1:9092) exits 0
when the broker at that address answers ApiVersions v0 with error code 0, 1 otherwise.
The broker queues requests until its start-up is complete, so an answer means it is
serving. With ``--ssl-ca`` the connection is TLS, the broker's certificate checked
against that authority and HOST; that also probes a SASL_SSL listener, which answers
ApiVersions before any login (Kafka's SaslServerAuthenticator).

ApiVersions v0 on the wire (Kafka's protocol; big-endian):

    request   size int32 | api_key int16 (18) | api_version int16 (0)
              | correlation_id int32 | client_id int16 length + bytes      (empty body)
    response  size int32 | correlation_id int32 | error_code int16 | api_keys array ...
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys
from typing import Final

_API_VERSIONS: Final = 18
_CORRELATION_ID: Final = 0x7469_6572  # "tier"
_CLIENT_ID: Final = b"tiercel-healthcheck"
_HEADER: Final = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, len
_RESPONSE_PREFIX: Final = struct.Struct(">iih")  # size, correlation_id, error_code
_TIMEOUT_S: Final = 5.0


def api_versions_request() -> bytes:
    size = _HEADER.size - 4 + len(_CLIENT_ID)
    return _HEADER.pack(size, _API_VERSIONS, 0, _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID


def probe(
    host: str, port: int, timeout: float = _TIMEOUT_S, ssl_ca: str | None = None
) -> str | None:
    """None when the broker answers well; otherwise what went wrong."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as plain:
            sock = plain
            if ssl_ca is not None:
                context = ssl.create_default_context(cafile=ssl_ca)
                sock = context.wrap_socket(plain, server_hostname=host)
            sock.sendall(api_versions_request())
            answer = b""
            while len(answer) < _RESPONSE_PREFIX.size:
                chunk = sock.recv(_RESPONSE_PREFIX.size - len(answer))
                if not chunk:
                    return "connection closed before the response"
                answer += chunk
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    _, correlation_id, error_code = _RESPONSE_PREFIX.unpack(answer)
    if correlation_id != _CORRELATION_ID:
        return f"response to correlation id {correlation_id}, not {_CORRELATION_ID}"
    if error_code != 0:
        return f"ApiVersions error code {error_code}"
    return None


def main(argv: list[str]) -> int:
    ssl_ca = None
    if argv[:1] == ["--ssl-ca"] and len(argv) > 1:
        ssl_ca, argv = argv[1], argv[2:]
    host, _, port = (argv[0] if argv else "127.0.0.1:9092").rpartition(":")
    problem = probe(host.strip("[]"), int(port), ssl_ca=ssl_ca)
    if problem is not None:
        print(f"tiercel-healthcheck: {host}:{port}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
