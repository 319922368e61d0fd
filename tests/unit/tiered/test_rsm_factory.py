"""The RemoteStorageManager chosen by remote.log.storage.manager.class.name and
configured by the rsm.config.* properties: each kind, and each kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.rsm_plugin import DirectoryRsm
from tiercel.config.config_def import ConfigError
from tiercel.tiered.rsm.factory import create_remote_storage_manager
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.s3_config import MIB, S3Config
from tiercel.tiered.rsm.s3_remote_storage import S3RemoteStorageManager


def test_local_under_the_given_dir(tmp_path: Path) -> None:
    rsm = create_remote_storage_manager("local", {"dir": str(tmp_path / "tier")}, "/unused")
    assert isinstance(rsm, LocalTieredStorage)
    assert rsm.root == str(tmp_path / "tier")
    assert (tmp_path / "tier").is_dir()


def test_local_under_the_default_dir(tmp_path: Path) -> None:
    rsm = create_remote_storage_manager(" local ", {}, str(tmp_path / "remote-storage"))
    assert isinstance(rsm, LocalTieredStorage)
    assert rsm.root == str(tmp_path / "remote-storage")


def test_local_in_a_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"rsm\.config\.dir") as raised:
        create_remote_storage_manager("local", {"dir": str(tmp_path / "file" / "x")}, "")
    assert raised.value.key == "rsm.config.dir"


@pytest.mark.usefixtures("aws_test_credentials")  # boto3 resolves credentials up front
def test_s3_with_every_setting() -> None:
    rsm = create_remote_storage_manager(
        "s3",
        {
            "s3.bucket": "tier",
            "s3.prefix": "cluster-1",
            "s3.region": "eu-west-1",
            "s3.endpoint.url": "http://127.0.0.1:9000",
            "s3.multipart.part.size.bytes": str(16 * MIB),
            "s3.connect.timeout.ms": "1500",
            "s3.read.timeout.ms": "2500",
            "s3.max.attempts": "5",
            "s3.path.style.access": "true",
        },
        "/unused",
    )
    assert isinstance(rsm, S3RemoteStorageManager)
    assert rsm.store.config == S3Config(
        "tier", "cluster-1/", "eu-west-1", "http://127.0.0.1:9000", 16 * MIB, 1.5, 2.5, 5, True
    )
    rsm.close()


@pytest.mark.usefixtures("aws_test_credentials")
def test_s3_defaults() -> None:
    rsm = create_remote_storage_manager("s3", {"s3.bucket": "tier"}, "/unused")
    assert isinstance(rsm, S3RemoteStorageManager)
    assert rsm.store.config == S3Config("tier", connect_timeout_s=10, read_timeout_s=30)
    assert rsm.store.config.part_size_bytes == 8 * MIB
    rsm.close()


@pytest.mark.parametrize(
    ("configs", "key", "message"),
    [
        ({}, "rsm.config.s3.bucket", "Missing required"),
        ({"s3.bucket": " "}, "rsm.config.s3.bucket", "Missing required"),
        (
            {"s3.bucket": "b", "s3.multipart.part.size.bytes": str(MIB)},
            "rsm.config.s3.multipart.part.size.bytes",
            "must be between 5242880 and 5368709120",
        ),
        ({"s3.bucket": "b", "s3.read.timeout.ms": "soon"}, "rsm.config.s3.read.timeout.ms", "INT"),
        ({"s3.bucket": "b", "s3.max.attempts": "0"}, "rsm.config.s3.max.attempts", "at least 1"),
        (
            {"s3.bucket": "b", "s3.path.style.access": "yes"},
            "rsm.config.s3.path.style.access",
            "BOOLEAN",
        ),
        (
            {"s3.bucket": "b", "s3.endpoint": "http://x"},
            "rsm.config.s3.endpoint",
            r"did you mean rsm\.config\.s3\.endpoint\.url\?",
        ),
        ({"s3.bucket": "b", "dir": "/tmp"}, "rsm.config.dir", "Unknown configuration"),
    ],
)
def test_bad_s3_settings(configs: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        create_remote_storage_manager("s3", configs, "/unused")
    assert raised.value.key == key


def test_an_unknown_local_key_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"did you mean rsm\.config\.dir\?") as raised:
        create_remote_storage_manager("local", {"dri": "/tmp/x"}, "/unused")
    assert raised.value.key == "rsm.config.dri"


def test_a_plugin_class_gets_the_properties(tmp_path: Path) -> None:
    configs = {"root": str(tmp_path / "plugged"), "anything": "goes"}
    rsm = create_remote_storage_manager("support.rsm_plugin:DirectoryRsm", configs, "/unused")
    assert isinstance(rsm, DirectoryRsm)
    assert dict(rsm.configs) == configs
    assert rsm.store.root == str(tmp_path / "plugged")


@pytest.mark.parametrize(
    ("class_name", "message"),
    [
        ("", "expected local, s3 or package.module:ClassName"),
        ("org.apache.kafka.server.log.remote.storage.LocalTieredStorage", "expected local"),
        ("no_such_module_here:Rsm", "cannot load it"),
        (":Rsm", "cannot load it"),
        ("support.rsm_plugin:NoSuchClass", "cannot load it"),
        ("support.rsm_plugin:", "cannot load it"),
        ("tiercel.tiered.rsm.factory:RSM_CLASS_NAME", "it is not a class"),
        ("builtins:dict", "it is not a RemoteStorageManager"),
        ("support.rsm_plugin:DirectoryRsm", "constructor refused.*needs rsm.config.root"),
        ("tiercel.tiered.rsm.local_tiered_storage:LocalTieredStorage", "constructor refused"),
    ],
)
def test_a_bad_class_name(class_name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        create_remote_storage_manager(class_name, {}, "/unused")
    assert raised.value.key == "remote.log.storage.manager.class.name"
