"""Batch outbox and relay (DESIGN.md section 4): creation, cancel, relay, derived status."""
