"""A RemoteStorageManager of the kind a user plugs in by ``package.module:ClassName``:
constructed with the ``rsm.config.`` properties, as Kafka's ``configure(Map)``."""

from __future__ import annotations

from collections.abc import Mapping

from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_store_rsm import ObjectStoreRemoteStorageManager


class DirectoryRsm(ObjectStoreRemoteStorageManager):
    def __init__(self, configs: Mapping[str, str]) -> None:
        if "root" not in configs:
            raise ValueError("DirectoryRsm needs rsm.config.root")
        self.configs = configs
        super().__init__(LocalDirectoryStore(configs["root"]))
