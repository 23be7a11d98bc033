"""Structured logging for every jobrelay process (structlog).

`configure_logging(settings)` once per process, then `structlog.get_logger(__name__)`.
Context shared by every line of a unit of work (a job id, a child id, a batch id) is bound
with `structlog.contextvars.bound_contextvars(...)`; it follows the asyncio task it was
bound in, so concurrent messages or jobs never mix their ids. When the process traces
(`jobrelay.tracing`), a line logged inside a span carries its `trace_id` and `span_id`.

Format: JSON lines when `log_format` is `json`, or `auto` and the stream is not a
terminal; a colored console rendering otherwise. Standard-library loggers (uvicorn,
botocore, ...) go through the same renderer, so a process writes one format only.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog
import structlog.tracebacks

from jobrelay import tracing
from jobrelay.settings import Settings

# Libraries that are chatty at INFO and say nothing an operator of jobrelay needs.
# Libraries that warn on every reconnection attempt: during a database outage the pool
# retries about once a second, and jobrelay's loops already log one line when they start
# failing and one when they recover.
_RETRYING_LIBRARIES = ("psycopg.pool",)
_QUIET_LIBRARIES = (
    "alembic",
    "botocore",
    "aiobotocore",
    "urllib3",
    "httpx",
    "httpcore",
    "asyncio",
)


def use_json(settings: Settings, stream: TextIO) -> bool:
    """True when lines should be JSON (`json`, or `auto` without a terminal)."""
    if settings.log.format == "json":
        return True
    if settings.log.format == "console":
        return False
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def configure_logging(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging to `stream` (default stdout) in one format."""
    out = stream if stream is not None else sys.stdout
    level = logging.getLevelNamesMapping().get(settings.log.level.upper(), logging.INFO)
    as_json = use_json(settings, out)

    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        tracing.add_trace_ids,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: structlog.types.Processor
    if as_json:
        # Tracebacks as data, without each frame's local variables: those hold payloads,
        # tokens and connection strings, and after a database outage every worker loop
        # logged tens of kilobytes of them per line.
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=_isatty(out))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    for name in _RETRYING_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.ERROR))


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())
