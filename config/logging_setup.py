"""Logging set-up: structured lines, one per event, logfmt style, with levels.

    2026-11-21T15:04:05.123Z INFO tiercel.network event=invalid_request_size client=...

`log_event` is the one way broker code logs an event: a stable event name plus fields,
so operators can grep and parse the lines; `configure_logging` installs the formatter
(the broker's CLI calls it once at start-up).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Final

_NEEDS_QUOTES: Final = frozenset(' "=\t\n')


def _render(value: object) -> str:
    text = str(value)
    if not text or any(ch in _NEEDS_QUOTES for ch in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def log_event(logger: logging.Logger, level: int, event: str, **fields: object) -> None:
    if logger.isEnabledFor(level):
        parts = [f"event={event}"]
        parts.extend(f"{key}={_render(value)}" for key, value in fields.items())
        logger.log(level, " ".join(parts))


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = f"{stamp}.{int(record.msecs):03d}Z {record.levelname} {record.name} "
        line += record.getMessage()
        if record.exc_info:
            line += " exception=" + _render(self.formatException(record.exc_info))
        return line


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
