"""Sign and verify webhook deliveries per the Standard Webhooks scheme."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from standardwebhooks.webhooks import Webhook

from jobrelay.ids import new_id

TOLERANCE = timedelta(minutes=5)


class WebhookRejected(Exception):
    """A delivery that must not be processed; `status_code` is the HTTP answer."""

    status_code = 400


class Unauthorized(WebhookRejected):
    """Missing headers, a timestamp outside the tolerance, or no matching signature."""

    status_code = 401


class Malformed(WebhookRejected):
    """Headers that cannot be parsed, or a body that is not UTF-8 JSON."""

    status_code = 400


@dataclass(frozen=True, slots=True)
class VerifiedWebhook:
    """A delivery whose signature matched one of the active secrets."""

    webhook_id: str
    timestamp: datetime
    body: bytes
    payload: Any


class WebhookSigner:
    """Signs outgoing deliveries with one secret (`whsec_<base64>`)."""

    def __init__(self, secret: str) -> None:
        self._webhook = Webhook(secret)

    def headers(
        self, body: bytes, *, webhook_id: str | None = None, timestamp: datetime | None = None
    ) -> dict[str, str]:
        """The three Standard Webhooks headers for `body`."""
        msg_id = webhook_id or f"msg_{new_id()}"
        when = timestamp or datetime.now(UTC)
        signature = self._webhook.sign(msg_id, when, body.decode("utf-8"))
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": signature,
        }


class WebhookVerifier:
    """Verifies deliveries against several active secrets (rotation: any one may match)."""

    def __init__(self, secrets: Sequence[str], *, tolerance: timedelta = TOLERANCE) -> None:
        if not secrets:
            raise ValueError("at least one webhook secret is required")
        self._webhooks = [Webhook(secret) for secret in secrets]
        self._tolerance = tolerance

    def verify(
        self, headers: Mapping[str, str], body: bytes, *, now: datetime | None = None
    ) -> VerifiedWebhook:
        """Return the verified delivery or raise `Unauthorized` / `Malformed`."""
        lowered = {k.lower(): v for k, v in headers.items()}
        msg_id = lowered.get("webhook-id", "")
        raw_timestamp = lowered.get("webhook-timestamp", "")
        raw_signatures = lowered.get("webhook-signature", "")
        if not (msg_id and raw_timestamp and raw_signatures):
            raise Unauthorized("missing webhook-id, webhook-timestamp or webhook-signature")
        timestamp = _parse_timestamp(raw_timestamp)
        signatures = _parse_signatures(raw_signatures)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Malformed("the body is not UTF-8") from exc
        current = now or datetime.now(UTC)
        if abs(current - timestamp) > self._tolerance:
            raise Unauthorized("webhook-timestamp is outside the 5 minute tolerance")
        if not any(
            self._matches(webhook, msg_id, timestamp, text, signatures)
            for webhook in self._webhooks
        ):
            raise Unauthorized("no matching signature")
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Malformed(f"the body is not JSON: {exc.msg}") from exc
        return VerifiedWebhook(webhook_id=msg_id, timestamp=timestamp, body=body, payload=payload)

    @staticmethod
    def _matches(
        webhook: Webhook, msg_id: str, timestamp: datetime, text: str, signatures: list[bytes]
    ) -> bool:
        expected = base64.b64decode(webhook.sign(msg_id, timestamp, text).split(",", 1)[1])
        return any(hmac.compare_digest(expected, candidate) for candidate in signatures)


def _parse_timestamp(raw: str) -> datetime:
    try:
        return datetime.fromtimestamp(int(raw), tz=UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise Malformed("webhook-timestamp is not a Unix timestamp in seconds") from exc


def _parse_signatures(raw: str) -> list[bytes]:
    """The v1 signatures of a space-separated `v1,<base64>` list (other versions ignored)."""
    signatures: list[bytes] = []
    for entry in raw.split():
        version, sep, encoded = entry.partition(",")
        if not sep or not encoded:
            raise Malformed("webhook-signature entries must look like v1,<base64>")
        if version != "v1":
            continue
        try:
            signatures.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise Malformed("webhook-signature is not valid base64") from exc
    return signatures
