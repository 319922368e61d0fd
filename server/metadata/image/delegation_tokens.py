"""The delegation tokens of the metadata image, by token id, and changes to them
(Kafka's DelegationTokenData, DelegationTokenImage and DelegationTokenDelta; KIP-48).
A token's repr hides it, as Kafka's toString does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import (
    DelegationTokenRecord,
    RemoveDelegationTokenRecord,
)
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = ["DelegationTokenData", "DelegationTokenDelta", "DelegationTokenImage"]


@dataclass(frozen=True, slots=True)
class DelegationTokenData:
    """A token's information: its owner, requester and renewers ("User:alice"), and
    when it was issued, must be renewed by, and can no longer be renewed after."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int

    def __repr__(self) -> str:
        return "DelegationTokenData(tokenInformation=[hidden])"

    @classmethod
    def from_record(cls, record: DelegationTokenRecord) -> DelegationTokenData:
        return cls(
            record.token_id,
            record.owner,
            record.requester,
            record.renewers,
            record.issue_timestamp,
            record.max_timestamp,
            record.expiration_timestamp,
        )

    def to_record(self) -> DelegationTokenRecord:
        return DelegationTokenRecord(
            owner=self.owner,
            requester=self.requester,
            renewers=self.renewers,
            issue_timestamp=self.issue_timestamp,
            max_timestamp=self.max_timestamp,
            expiration_timestamp=self.expiration_timestamp,
            token_id=self.token_id,
        )


@dataclass(frozen=True, slots=True)
class DelegationTokenImage:
    """Every token by its id. A value; any thread."""

    EMPTY: ClassVar[DelegationTokenImage]

    tokens: Mapping[str, DelegationTokenData]

    def is_empty(self) -> bool:
        return not self.tokens

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """Before 3.6-IV2 there is no token record: tokens are a loss."""
        if not options.metadata_version.is_delegation_token_supported():
            if self.tokens:
                options.handle_loss(f"DelegationTokenImage({', '.join(self.tokens)})")
            return
        for token in self.tokens.values():
            writer.write(ApiMessageAndVersion(token.to_record(), 0))


DelegationTokenImage.EMPTY = DelegationTokenImage(MappingProxyType({}))


class DelegationTokenDelta:
    """Tokens created or renewed, and removed (None). Not thread-safe."""

    def __init__(self, image: DelegationTokenImage) -> None:
        self.image = image
        self.changes: dict[str, DelegationTokenData | None] = {}

    def replay(self, record: DelegationTokenRecord | RemoveDelegationTokenRecord) -> None:
        if isinstance(record, DelegationTokenRecord):
            self.changes[record.token_id] = DelegationTokenData.from_record(record)
        else:
            self.changes[record.token_id] = None

    def finish_snapshot(self) -> None:
        for token_id in self.image.tokens:
            self.changes.setdefault(token_id, None)

    def apply(self) -> DelegationTokenImage:
        return DelegationTokenImage(apply_changes(self.image.tokens, self.changes))
