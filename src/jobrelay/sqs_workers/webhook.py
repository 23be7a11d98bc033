"""Posting a signed outcome to the API, with bounded retries.

- The body is `WorkerOutcome` as camelCase JSON without nulls. The `webhook-id` is derived
  from the body (`msg_<sha256 prefix>`), so every retry and every redelivery of the same
  outcome carries the same id, and the API acknowledges repeats without reprocessing.
- 2xx: accepted. 409: the child already ended with another outcome (or another attempt):
  nothing more to do. Other 4xx except 429 (400, 401, 403, 404, 413, 422, ...): rejected,
  no retry; a human must look (bad secret, wrong URL, contract mismatch).
- 5xx, 429 and network errors: retried with exponential backoff and jitter (a
  `Retry-After` is honoured within the cap) until the retry budget is spent: gave up.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass
from typing import Literal

import httpx
import structlog

from jobrelay.protocol import WorkerOutcome
from jobrelay.webhooks import WebhookSigner

log = structlog.get_logger(__name__)

Verdict = Literal["accepted", "conflict", "rejected", "gave_up"]


@dataclass(frozen=True)
class Delivery:
    verdict: Verdict
    status_code: int | None
    attempts: int


def outcome_body(outcome: WorkerOutcome) -> bytes:
    return outcome.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")


def webhook_id(body: bytes) -> str:
    return f"msg_{hashlib.sha256(body).hexdigest()[:32]}"


class WebhookClient:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        url: str,
        signer: WebhookSigner,
        request_timeout_s: float,
        retry_budget_s: float,
        backoff_base_s: float,
        backoff_cap_s: float,
    ) -> None:
        self._http = http
        self._url = url
        self._signer = signer
        self._timeout = request_timeout_s
        self._budget = retry_budget_s
        self._base = backoff_base_s
        self._cap = backoff_cap_s

    async def deliver(self, outcome: WorkerOutcome) -> Delivery:
        body = outcome_body(outcome)
        msg_id = webhook_id(body)
        deadline = time.monotonic() + self._budget
        attempt = 0
        while True:
            attempt += 1
            headers = self._signer.headers(body, webhook_id=msg_id)
            headers["content-type"] = "application/json"
            retry_after: float | None = None
            status: int | None = None
            try:
                response = await self._http.post(
                    self._url, content=body, headers=headers, timeout=self._timeout
                )
                status = response.status_code
            except httpx.HTTPError as exc:
                log.warning("webhook request failed", error=type(exc).__name__, webhook_try=attempt)
            else:
                if 200 <= status < 300:
                    return Delivery("accepted", status, attempt)
                if status == 409:
                    return Delivery("conflict", status, attempt)
                if 400 <= status < 500 and status != 429:
                    return Delivery("rejected", status, attempt)
                retry_after = _retry_after(response)
                log.warning(
                    "webhook answered a retryable status", status=status, webhook_try=attempt
                )
            delay = min(self._cap, self._base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self._cap))
            if time.monotonic() + delay > deadline:
                return Delivery("gave_up", status, attempt)
            await asyncio.sleep(delay)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None
