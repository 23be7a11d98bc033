"""Batch outbox and relay (docs/explanation/batches.md): creation, cancel, relay, derived status."""
