"""Diagnostic job types (`diag.noop`, `diag.sleep`, `diag.fail`) for benchmarks, smoke
checks and the ops runbook, declared on the engine's public API; a deployment loads them
when `JOBRELAY_DIAG_JOBS_ENABLED` is true."""

from jobrelay.diagnostics.job_types import job_types

__all__ = ["job_types"]
