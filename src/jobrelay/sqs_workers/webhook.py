"""Posting a signed outcome to the API, with bounded retries.

- The body is `WorkerOutcome` as camelCase JSON without nulls. The `webhook-id` is derived
  from the body (`msg_<sha256 prefix>`), so every retry and every redelivery of the same
  outcome carries the same id, and the API acknowledges repeats without reprocessing.
- 2xx: accepted. 409: the child already ended with another outcome (or another attempt):
  nothing more to do. Other 4xx except 429 (400, 401, 403, 404, 413, 422, ...): rejected,
  no retry; a human must look (bad secret, wrong URL, contract mismatch).
- 5xx, 429 and network errors: retried with exponential backoff and jitter (a
  `Retry-After` is honoured within the cap) until the retry budget is spent: gave up.
  The waits are `jobrelay.loops.retry`'s, which logs each one (`retry.waiting`).
- Each HTTP call is a client span (`jobrelay.tracing`) whose context travels in the
  `traceparent` header, so the API's request and the outcome it applies join the trace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import httpx

from jobrelay import tracing
from jobrelay.loops import Backoff, retry
from jobrelay.protocol import WorkerOutcome
from jobrelay.webhooks import WebhookSigner

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
        # Half jitter: workers that failed together spread their retries.
        self._backoff = Backoff(base_s=backoff_base_s, cap_s=backoff_cap_s, jitter=0.5)

    async def deliver(self, outcome: WorkerOutcome) -> Delivery:
        """Post `outcome` until it is answered for good or the retry budget is spent."""
        body = outcome_body(outcome)
        msg_id = webhook_id(body)
        tries: list[WebhookUnavailable] = []

        async def post() -> Delivery:
            headers = self._signer.headers(body, webhook_id=msg_id)
            headers["content-type"] = "application/json"
            attempt = len(tries) + 1
            try:
                response = await self._post(body, headers, attempt)
            except httpx.HTTPError as exc:
                tries.append(WebhookUnavailable(None, None, type(exc).__name__))
                raise tries[-1] from exc
            status = response.status_code
            if 200 <= status < 300:
                return Delivery("accepted", status, attempt)
            if status == 409:
                return Delivery("conflict", status, attempt)
            if 400 <= status < 500 and status != 429:
                return Delivery("rejected", status, attempt)
            tries.append(WebhookUnavailable(status, _retry_after(response), f"HTTP {status}"))
            raise tries[-1]

        try:
            return await retry(
                post,
                what="webhook delivery",
                retry_on=_is_unavailable,
                backoff=self._backoff,
                budget_s=self._budget,
                delay_hint=_hinted_delay,
            )
        except WebhookUnavailable as last:
            return Delivery("gave_up", last.status, len(tries))

    async def _post(self, body: bytes, headers: dict[str, str], attempt: int) -> httpx.Response:
        """One call, in a client span whose context the `traceparent` header carries."""
        with tracing.span(
            "jobrelay.webhook.call",
            kind="client",
            attributes={"http.request.method": "POST", "http.request.resend_count": attempt - 1},
        ) as span:
            tracing.inject(headers)
            response = await self._http.post(
                self._url, content=body, headers=headers, timeout=self._timeout
            )
            if span is not None:
                span.set_attribute("http.response.status_code", response.status_code)
                # 409: the child already ended otherwise, an answer, not an error.
                if response.status_code >= 400 and response.status_code != 409:
                    tracing.fail(f"HTTP {response.status_code}")
            return response


class WebhookUnavailable(Exception):
    """A 5xx, a 429 or a network error: worth another try (after `Retry-After` if given)."""

    def __init__(self, status: int | None, retry_after: float | None, what: str) -> None:
        super().__init__(what)
        self.status = status
        self.retry_after = retry_after


def _is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, WebhookUnavailable)


def _hinted_delay(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, WebhookUnavailable) else None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None
