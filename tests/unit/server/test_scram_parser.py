"""``storage format --add-scram``: Kafka's ScramParser syntax and messages (the cases of
ScramParserTest), and the UserScramCredentialRecords it writes into the bootstrap
metadata (FormatterTest's SCRAM cases)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from test_storage_command import CLUSTER_ID, kraft_args

from tiercel.protocol.metadata.security_records import UserScramCredentialRecord
from tiercel.protocol.sasl.scram_formatter import ScramMechanism
from tiercel.server.cli import main
from tiercel.server.metadata.bootstrap_directory import read_bootstrap_metadata
from tiercel.server.scram_parser import ScramParserError, parse_scram_arguments

TEST_SALT = bytes(
    [49, 108, 118, 52, 112, 100, 110, 119, 52, 102, 119, 113, 55, 110, 111, 116, 99, 120,
     109, 48, 121, 121, 49, 107, 55, 113]
)  # fmt: skip
SALT_B64 = "MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFrN3E="
SALTED_B64 = "mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE="


def _record(argument: str) -> UserScramCredentialRecord:
    [record] = parse_scram_arguments([argument])
    assert isinstance(record.message, UserScramCredentialRecord)
    return record.message


def test_password_with_defaults() -> None:
    record = _record("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    mechanism = ScramMechanism.SCRAM_SHA_256
    expected = mechanism.credential(
        record.salt, mechanism.salted_password("alice-secret", record.salt, 4096), 4096
    )
    assert (record.name, record.mechanism, record.iterations) == ("alice", 1, 4096)
    assert (record.stored_key, record.server_key) == (expected.stored_key, expected.server_key)
    assert record.salt != _record("SCRAM-SHA-256=[name=alice,password=alice-secret]").salt


def test_salted_password_and_quoted_values_as_kafka_writes_them() -> None:
    record = _record(f'SCRAM-SHA-512=[name=alice,salt="{SALT_B64}",saltedpassword="{SALTED_B64}"]')
    salted = base64.b64decode(SALTED_B64)
    mechanism = ScramMechanism.SCRAM_SHA_512
    assert record == UserScramCredentialRecord(
        name="alice",
        mechanism=2,
        salt=TEST_SALT,
        stored_key=mechanism.stored_key(mechanism.client_key(salted)),
        server_key=mechanism.server_key(salted),
        iterations=4096,
    )


def test_iterations_and_salt_with_a_password() -> None:
    record = _record(f'SCRAM-SHA-256=[name=bob,password=my pass,iterations=8192,salt="{SALT_B64}"]')
    assert (record.name, record.salt, record.iterations) == ("bob", TEST_SALT, 8192)


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("SCRAM-SHA-512", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-512'"),
        (
            "SCRAM-SHA-UNSUPPORTED=[name=scram-admin,password=scram-user-secret]",
            "The add-scram mechanism SCRAM-SHA-UNSUPPORTED is not supported.",
        ),
        (
            "SCRAM-SHA-256=name=scram-admin,password=scram-user-secret",
            "Expected configuration string to start with [",
        ),
        (
            "SCRAM-SHA-256=[name=scram-admin,password=scram-user-secret",
            "Expected configuration string to end with ]",
        ),
        ("SCRAM-SHA-256=[password=mypass]", "You must supply 'name' to add-scram"),
        (
            "SCRAM-SHA-256=[name=bar]",
            "You must supply one of 'password' or 'saltedpassword' to add-scram",
        ),
        (
            "SCRAM-SHA-256=[name=bob,password=mypass,unknown=something,unknown2=somethingelse]",
            "Unknown SCRAM configurations: unknown, unknown2",
        ),
        (
            f'SCRAM-SHA-256=[name=alice,saltedpassword="{SALTED_B64}"]',
            "You must supply 'salt' with 'saltedpassword' to add-scram",
        ),
        ("SCRAM-SHA-256=[name]", "No equals sign found in SCRAM component: name"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
        ("SCRAM-SHA-256=[name=a,password=b,salt=%%%]", "Failed to decode given salt: %%%"),
        (
            "SCRAM-SHA-256=[name=a,password=b,iterations=4095]",
            "The 'iterations' value must be >= 4096 for add-scram using SCRAM_SHA_256",
        ),
        (
            "SCRAM-SHA-512=[name=a,password=b,iterations=16385]",
            "The 'iterations' value must be <= 16384 for add-scram using SCRAM_SHA_512",
        ),
    ],
)
def test_refused(argument: str, message: str) -> None:
    with pytest.raises(ScramParserError, match=f"^{re.escape(message)}$"):
        parse_scram_arguments([argument])


def test_format_writes_the_users_into_the_bootstrap_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--add-scram",
        "SCRAM-SHA-256=[name=alice,password=alice-secret]",
        "-S",
        "SCRAM-SHA-512=[name=admin,password=admin-secret]",
    ]
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path), *args]) == 0
    records = [r.message for r in read_bootstrap_metadata(str(tmp_path / "meta")).records]
    users = [(r.name, r.mechanism) for r in records if isinstance(r, UserScramCredentialRecord)]
    assert users == [("alice", 1), ("admin", 2)]
    assert "alice-secret" not in (tmp_path / "meta" / "bootstrap.checkpoint").read_text("latin-1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--release-version", "3.5-IV1", "-S", "SCRAM-SHA-256=[name=a,password=b]"],
            "SCRAM is only supported in metadata.version 3.5-IV2 or later.",
        ),
        (["-S", "SCRAM-SHA-256=[name=a]"], "You must supply one of 'password'"),
    ],
)
def test_format_refuses_bad_scram_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["storage", "format", "-t", CLUSTER_ID, *kraft_args(tmp_path), *args]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "meta" / "meta.properties").exists()
