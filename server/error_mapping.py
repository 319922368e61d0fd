"""Turning any failure into a Kafka error, so one bad partition never fails a request;
and errors as old request versions know them."""

from __future__ import annotations

import logging
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, KafkaError, KafkaStorageError, UnknownServerError

_log: Final = logging.getLogger("tiercel.errors")


def as_kafka_error(e: Exception, context: str) -> KafkaError:
    """``e`` itself if it is a Kafka error; an I/O error becomes KAFKA_STORAGE_ERROR and
    anything else UNKNOWN_SERVER_ERROR, logged with ``context`` because it is a bug."""
    if isinstance(e, KafkaError):
        return e
    if isinstance(e, OSError):
        log_event(_log, logging.ERROR, "storage_error", context=context, reason=repr(e))
        return KafkaStorageError(f"{context}: {e}")
    log_event(_log, logging.ERROR, "unexpected_error", context=context, reason=repr(e))
    _log.debug("traceback", exc_info=e)
    return UnknownServerError(str(e))


def producer_fenced_for_version(
    error: ErrorCode, api_version: int, first_version: int
) -> ErrorCode:
    """PRODUCER_FENCED (90, KIP-588) as clients of ``api_version`` know it: versions
    before ``first_version`` predate the code, so they get INVALID_PRODUCER_EPOCH, which
    they handle the same way (Kafka's KafkaApis handlers of InitProducerId, EndTxn,
    AddPartitionsToTxn and AddOffsetsToTxn do this translation)."""
    if error == ErrorCode.producer_fenced and api_version < first_version:
        return ErrorCode.invalid_producer_epoch
    return error
