"""Reference handlers, one per child kind: deterministic, real parsing, loopback-only I/O."""

from __future__ import annotations

from typing import Any

from jobrelay.sqs_workers.handlers.code2des import Code2DesHandler
from jobrelay.sqs_workers.handlers.code2wf import Code2WfHandler
from jobrelay.sqs_workers.handlers.common import Handler, HandlerContext, canonical_json
from jobrelay.sqs_workers.handlers.page_import import PageImportHandler

HANDLERS: dict[str, Handler[Any]] = {
    "page_import": PageImportHandler(),
    "code2des": Code2DesHandler(),
    "code2wf": Code2WfHandler(),
}

__all__ = [
    "HANDLERS",
    "Code2DesHandler",
    "Code2WfHandler",
    "Handler",
    "HandlerContext",
    "PageImportHandler",
    "canonical_json",
]
