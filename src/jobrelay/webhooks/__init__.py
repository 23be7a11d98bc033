"""Standard Webhooks signing and verification, shared by the API and the SQS workers."""
