"""Certificates for TLS tests, made in the test session (never committed).

`make_pki(directory)` writes a certificate authority and, signed by it, a broker
certificate for 127.0.0.1/localhost and two client certificates, as PEM files (each key
beside its chain, and an encrypted-key variant) and as PKCS12 stores; `other_ca` is an
authority nobody trusts. Keys are EC P-256: quick to make on a loaded machine.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

PASSWORD = "tiercel-test"


@dataclass(frozen=True)
class Identity:
    """A key and its certificate chain, as files."""

    key_pem: Path  # the key alone, unencrypted
    chain_pem: Path  # the certificate, then the CA's
    keystore_pem: Path  # key then chain: ssl.keystore.location with type PEM
    encrypted_keystore_pem: Path  # the same with the key encrypted with PASSWORD
    pkcs12: Path  # key and chain, store and key password PASSWORD
    subject: str  # RFC 2253


@dataclass(frozen=True)
class Pki:
    ca_pem: Path
    truststore_p12: Path  # the CA certificate alone, password PASSWORD
    broker: Identity
    client: Identity  # CN=alice,OU=ServiceUsers
    other_client: Identity  # CN=bob,OU=Users, signed by the CA
    other_ca_pem: Path
    untrusted_client: Identity  # signed by the other CA


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tiercel"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool,
    hosts: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if hosts:
        names: list[x509.GeneralName] = [x509.DNSName("localhost")]
        names += [x509.IPAddress(ipaddress.ip_address(h)) for h in hosts]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _identity(
    directory: Path,
    label: str,
    subject: x509.Name,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    hosts: tuple[str, ...] = (),
) -> Identity:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(subject, key, ca_cert.subject, ca_key, False, hosts)
    plain = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode()),
    )
    chain = _pem(cert) + _pem(ca_cert)
    paths = Identity(
        key_pem=directory / f"{label}.key.pem",
        chain_pem=directory / f"{label}.chain.pem",
        keystore_pem=directory / f"{label}.keystore.pem",
        encrypted_keystore_pem=directory / f"{label}.encrypted.keystore.pem",
        pkcs12=directory / f"{label}.p12",
        subject=subject.rfc4514_string(),
    )
    paths.key_pem.write_bytes(plain)
    paths.chain_pem.write_bytes(chain)
    paths.keystore_pem.write_bytes(plain + chain)
    paths.encrypted_keystore_pem.write_bytes(encrypted + chain)
    paths.pkcs12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            label.encode(),
            key,
            cert,
            [ca_cert],
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    return paths


def _authority(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(name, "CA")
    return _certificate(subject, key, subject, key, True), key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _authority("Tiercel Test CA")
    other = _authority("Untrusted CA")
    ca_pem, other_pem = directory / "ca.pem", directory / "other-ca.pem"
    ca_pem.write_bytes(_pem(ca[0]))
    other_pem.write_bytes(_pem(other[0]))
    truststore = directory / "truststore.p12"
    truststore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            None, None, None, [ca[0]], serialization.BestAvailableEncryption(PASSWORD.encode())
        )
    )
    return Pki(
        ca_pem=ca_pem,
        truststore_p12=truststore,
        broker=_identity(directory, "broker", _name("broker", "Brokers"), ca, ("127.0.0.1",)),
        client=_identity(directory, "client", _name("alice", "ServiceUsers"), ca),
        other_client=_identity(directory, "bob", _name("bob", "Users"), ca),
        other_ca_pem=other_pem,
        untrusted_client=_identity(directory, "mallory", _name("mallory", "Users"), other),
    )
