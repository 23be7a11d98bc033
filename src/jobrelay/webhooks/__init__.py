"""Standard Webhooks signing and verification, shared by the API and the SQS workers.

Signing uses the reference `standardwebhooks` library. Verification parses the headers
itself so that every rejection is typed: `Unauthorized` (401: missing headers, stale
timestamp, no matching signature) or `Malformed` (400: unparsable headers, a body that is
not UTF-8 or not JSON). The reference verifier raises plain `ValueError` or
`UnicodeDecodeError` for some of those, which an API would turn into a 500.
"""

from jobrelay.webhooks.signing import (
    Malformed,
    Unauthorized,
    VerifiedWebhook,
    WebhookRejected,
    WebhookSigner,
    WebhookVerifier,
)

__all__ = [
    "Malformed",
    "Unauthorized",
    "VerifiedWebhook",
    "WebhookRejected",
    "WebhookSigner",
    "WebhookVerifier",
]
