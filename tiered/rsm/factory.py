"""The RemoteStorageManager a broker's configuration names.

Kafka loads the class named by ``remote.log.storage.manager.class.name`` and calls its
``configure(Map)`` with the ``rsm.config.``-prefixed properties, prefix stripped
(``RemoteLogManager.createRemoteStorageManager``). Here the name is one of:

- ``local``: `LocalTieredStorage` under ``dir`` (the caller's default when unset);
- ``s3``: `S3RemoteStorageManager`, with ``s3.bucket`` (required), ``s3.prefix``,
  ``s3.region``, ``s3.endpoint.url`` and the tuning keys of `S3_CONFIGS`;
- ``package.module:ClassName``: that class, constructed with the properties as a
  read-only mapping (its constructor is Kafka's ``configure``). It must provide the
  `RemoteStorageManager` operations.

The built-in implementations refuse keys they do not know, so a misspelt key is an error
rather than a silent default. Every problem is a `ConfigError` naming the full property.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Final, cast

from tiercel.config.config_def import ConfigDef, ConfigError, ConfigType, at_least, in_range
from tiercel.config.config_values import closest, parse_value
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageManager
from tiercel.tiered.rsm.s3_config import DEFAULT_PART_SIZE_BYTES, MIB, S3Config

__all__ = [
    "LOCAL_CONFIGS",
    "RSM_CLASS_NAME",
    "RSM_CONFIG_PREFIX",
    "S3_CONFIGS",
    "create_remote_storage_manager",
]

RSM_CLASS_NAME: Final = "remote.log.storage.manager.class.name"
RSM_CONFIG_PREFIX: Final = "rsm.config."

LOCAL_CONFIGS: Final = (
    ConfigDef("dir", ConfigType.STRING, None, None, "The directory of the remote tier."),
)
S3_CONFIGS: Final = (
    ConfigDef("s3.bucket", ConfigType.STRING, None, None, "The bucket (required)."),
    ConfigDef("s3.prefix", ConfigType.STRING, "", None, "The key prefix of every object."),
    ConfigDef("s3.region", ConfigType.STRING, None, None, "The region (else AWS's chain)."),
    ConfigDef("s3.endpoint.url", ConfigType.STRING, None, None, "An S3-compatible endpoint."),
    ConfigDef(
        "s3.multipart.part.size.bytes",
        ConfigType.LONG,
        DEFAULT_PART_SIZE_BYTES,
        in_range(5 * MIB, 5 * 1024 * MIB),  # S3's limits on a part
        "Objects larger than this go up in parts of this size.",
    ),
    ConfigDef("s3.connect.timeout.ms", ConfigType.INT, 10_000, at_least(1), "Connect timeout."),
    ConfigDef("s3.read.timeout.ms", ConfigType.INT, 30_000, at_least(1), "Read timeout."),
    ConfigDef("s3.max.attempts", ConfigType.INT, 3, at_least(1), "Tries of one request."),
    ConfigDef(
        "s3.path.style.access",
        ConfigType.BOOLEAN,
        False,
        None,
        "Bucket in the path, not the host name (for some S3-compatible services).",
    ),
)
_OPERATIONS: Final = (
    "copy_log_segment_data",
    "fetch_log_segment",
    "fetch_index",
    "delete_log_segment_data",
    "close",
)


def import_remote_storage_manager(class_name: str) -> None:
    """Import the module of the RemoteStorageManager ``class_name`` names, so that a
    broker can do it before its event loop starts: boto3's import, for the S3 manager,
    would otherwise hold the loop for a second or more on a loaded 2-core machine."""
    name = class_name.strip()
    if name == "s3":
        importlib.import_module("tiercel.tiered.rsm.s3_remote_storage")
    elif ":" in name:
        importlib.import_module(name.split(":", 1)[0])


def create_remote_storage_manager(
    class_name: str, configs: Mapping[str, str], default_dir: str
) -> RemoteStorageManager:
    """The RemoteStorageManager ``class_name`` names, configured by ``configs`` (the
    ``rsm.config.`` properties, prefix stripped); ``default_dir`` is the local tier's
    directory when ``dir`` is unset (``<first log dir>/remote-storage``)."""
    name = class_name.strip()
    if name == "local":
        return _local(configs, default_dir)
    if name == "s3":
        return _s3(configs)
    if ":" in name:
        return _plugin(name, configs)
    raise ConfigError(
        f"Invalid value {class_name!r} for configuration {RSM_CLASS_NAME}: expected local, "
        "s3 or package.module:ClassName",
        RSM_CLASS_NAME,
    )


def _parse(defs: tuple[ConfigDef, ...], configs: Mapping[str, str]) -> dict[str, object]:
    """``configs`` parsed by ``defs``, defaults filled in; an unknown key is an error."""
    known = {d.name: d for d in defs}
    for key in configs:
        if key not in known:
            hint = closest(key, known)
            raise ConfigError(
                f"Unknown configuration {RSM_CONFIG_PREFIX}{key} for this remote storage "
                f"manager{f' (did you mean {RSM_CONFIG_PREFIX}{hint}?)' if hint else ''}",
                RSM_CONFIG_PREFIX + key,
            )
    return {
        name: parse_value(d, configs[name], RSM_CONFIG_PREFIX + name)
        if name in configs
        else d.default
        for name, d in known.items()
    }


def _local(configs: Mapping[str, str], default_dir: str) -> LocalTieredStorage:
    directory = cast(str | None, _parse(LOCAL_CONFIGS, configs)["dir"]) or default_dir
    try:
        return LocalTieredStorage(directory)
    except OSError as e:
        raise ConfigError(
            f"Invalid value {directory!r} for configuration {RSM_CONFIG_PREFIX}dir: {e}",
            RSM_CONFIG_PREFIX + "dir",
        ) from e


def _s3(configs: Mapping[str, str]) -> RemoteStorageManager:
    # Imported here: boto3 takes a while to import, and only a broker tiering to S3
    # needs it.
    from tiercel.tiered.rsm.s3_remote_storage import S3RemoteStorageManager

    values = _parse(S3_CONFIGS, configs)
    if not values["s3.bucket"]:
        raise ConfigError(
            f"Missing required configuration {RSM_CONFIG_PREFIX}s3.bucket "
            f"(the remote storage manager is s3)",
            RSM_CONFIG_PREFIX + "s3.bucket",
        )
    return S3RemoteStorageManager(
        S3Config(
            bucket=cast(str, values["s3.bucket"]),
            prefix=cast(str, values["s3.prefix"]),
            region=cast(str | None, values["s3.region"]) or None,
            endpoint_url=cast(str | None, values["s3.endpoint.url"]) or None,
            part_size_bytes=cast(int, values["s3.multipart.part.size.bytes"]),
            connect_timeout_s=cast(int, values["s3.connect.timeout.ms"]) / 1000,
            read_timeout_s=cast(int, values["s3.read.timeout.ms"]) / 1000,
            max_attempts=cast(int, values["s3.max.attempts"]),
            path_style_access=cast(bool, values["s3.path.style.access"]),
        )
    )


def _plugin(class_name: str, configs: Mapping[str, str]) -> RemoteStorageManager:
    module_name, _, attribute = class_name.partition(":")

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"Invalid value {class_name!r} for configuration {RSM_CLASS_NAME}: {why}",
            RSM_CLASS_NAME,
        )

    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as e:
        raise refuse(f"cannot load it ({type(e).__name__}: {e})") from e
    if not callable(cls):
        raise refuse("it is not a class")
    try:
        rsm = cast(Callable[[Mapping[str, str]], object], cls)(
            types.MappingProxyType(dict(configs))
        )
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise refuse(f"its constructor refused the {RSM_CONFIG_PREFIX}* properties: {e!r}") from e
    missing = [op for op in _OPERATIONS if not callable(getattr(rsm, op, None))]
    if missing:
        raise refuse(f"it is not a RemoteStorageManager (no {', '.join(missing)})")
    return cast(RemoteStorageManager, rsm)
