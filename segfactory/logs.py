"""Logging: every record of every logger is rendered by structlog on stderr.

stdout carries ``--json`` objects, so logs never go there. By default a record reads as one line
for a person (time, level, logger, message), made inert (``segfactory.text.inert``: a message
may quote a sandbox's or a model's text); with ``segfactory --log-json`` (or
``SEGFACTORY_LOG_JSON=1``, which commands started on a person's behalf inherit) it is one JSON
object a line with ``timestamp``, ``level``, ``logger`` and ``event``, for a log collector. The
modules log through the standard ``logging`` API (``logging.getLogger(__name__)``), so the gate's
pinned copy, which runs without this module, makes the same calls in its own process.

structlog is imported at the first record, not at start-up: most commands log nothing, and the
CLI should start fast.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from segfactory.text import inert

LEVEL_ENV, JSON_ENV = "SEGFACTORY_LOG_LEVEL", "SEGFACTORY_LOG_JSON"


class _StructlogFormatter(logging.Formatter):
    """structlog's ``ProcessorFormatter``, built when the first record arrives."""

    def __init__(self, json_lines: bool) -> None:
        super().__init__()
        self.json_lines = json_lines
        self._inner: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._inner is None:
            self._inner = _processor_formatter(self.json_lines)
        text = self._inner.format(record)
        return text if self.json_lines else inert(text)  # JSON escapes controls itself


def _processor_formatter(json_lines: bool) -> logging.Formatter:
    import structlog

    shared: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )


def configure(*, json_lines: bool | None = None, level: str | None = None) -> None:
    """Route the root logger through structlog; ``None`` reads the environment (default: readable,
    WARNING)."""
    if json_lines is None:
        json_lines = os.environ.get(JSON_ENV, "") not in ("", "0")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StructlogFormatter(json_lines))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get(LEVEL_ENV, "WARNING")).upper())
    if json_lines:
        os.environ[JSON_ENV] = "1"  # a command restarted unprivileged (cli/_drop.py) logs the same way


__all__ = ["JSON_ENV", "LEVEL_ENV", "configure"]
