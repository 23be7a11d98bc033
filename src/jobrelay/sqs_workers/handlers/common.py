"""What every handler shares: canonical JSON, result keys, the handler interface."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from jobrelay.protocol import WorkerOutcome
from jobrelay.sqs_workers.fetch import PageFetcher
from jobrelay.sqs_workers.storage import ResultStore

SPEC_VERSION = 1


def canonical_json(document: Any) -> bytes:
    """UTF-8 JSON with sorted keys and no insignificant whitespace: equal data, equal bytes."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def result_key(kind: str, child_id: str, attempt: int, name: str) -> str:
    """`<kind>/<child id>/attempt-<n>/<name>`: one immutable object per child and attempt.

    The child id is percent-encoded so an id can never add path segments."""
    return f"{kind}/{quote(child_id, safe='')}/attempt-{attempt}/{name}"


@dataclass(frozen=True)
class HandlerContext:
    """What a handler may use besides its message: the result bucket and the page fetcher."""

    store: ResultStore
    fetcher: PageFetcher


M = TypeVar("M", contravariant=True)


class Handler(Protocol[M]):
    """One child kind. `produce` must be deterministic for a given message and inputs;
    `completed` derives the outcome from the stored bytes alone, so a redelivery that
    finds the object already stored reports exactly what the first delivery reported."""

    def result_key(self, message: M) -> str: ...

    async def produce(self, message: M, context: HandlerContext) -> bytes: ...

    def completed(self, message: M, key: str, stored: bytes) -> WorkerOutcome: ...
