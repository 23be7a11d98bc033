"""Standard Webhooks verification: every rejection is typed, never a bare ValueError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook

from jobrelay.webhooks import Malformed, Unauthorized, WebhookSigner, WebhookVerifier

OLD = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZA=="
NEW = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldw=="
BODY = b'{"kind": "page_import", "id": "x"}'


def test_signed_delivery_verifies_with_any_active_secret() -> None:
    headers = WebhookSigner(OLD).headers(BODY)
    verified = WebhookVerifier([NEW, OLD]).verify(headers, BODY)
    assert verified.payload == {"kind": "page_import", "id": "x"}
    assert verified.webhook_id == headers["webhook-id"]


def test_our_signature_is_what_the_reference_library_accepts() -> None:
    headers = WebhookSigner(NEW).headers(BODY)
    assert Webhook(NEW).verify(BODY, headers) == {"kind": "page_import", "id": "x"}


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_is_unauthorized(missing: str) -> None:
    headers = WebhookSigner(NEW).headers(BODY)
    del headers[missing]
    with pytest.raises(Unauthorized):
        WebhookVerifier([NEW]).verify(headers, BODY)


def test_wrong_secret_and_tampered_body_are_unauthorized() -> None:
    headers = WebhookSigner(OLD).headers(BODY)
    with pytest.raises(Unauthorized):
        WebhookVerifier([NEW]).verify(headers, BODY)
    with pytest.raises(Unauthorized):
        WebhookVerifier([OLD]).verify(headers, BODY.replace(b"x", b"y"))


@pytest.mark.parametrize("skew", [timedelta(minutes=-6), timedelta(minutes=6)])
def test_timestamp_outside_five_minutes_is_unauthorized(skew: timedelta) -> None:
    headers = WebhookSigner(NEW).headers(BODY, timestamp=datetime.now(UTC) + skew)
    with pytest.raises(Unauthorized, match="tolerance"):
        WebhookVerifier([NEW]).verify(headers, BODY)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("webhook-timestamp", "yesterday"),
        ("webhook-timestamp", "1e400"),
        ("webhook-signature", "v1"),
        ("webhook-signature", "v1,not*base64"),
        ("webhook-signature", "garbage"),
    ],
)
def test_malformed_headers_are_bad_requests(header: str, value: str) -> None:
    headers = WebhookSigner(NEW).headers(BODY)
    headers[header] = value
    with pytest.raises(Malformed):
        WebhookVerifier([NEW]).verify(headers, BODY)


def test_body_that_is_not_utf8_or_json_is_a_bad_request() -> None:
    with pytest.raises(Malformed, match="UTF-8"):
        WebhookVerifier([NEW]).verify(WebhookSigner(NEW).headers(b"{}"), b"\xff\xfe")
    not_json = b"not json"
    with pytest.raises(Malformed, match="JSON"):
        WebhookVerifier([NEW]).verify(WebhookSigner(NEW).headers(not_json), not_json)
