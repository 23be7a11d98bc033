"""The error every start-up step raises: one line saying what to do."""

from __future__ import annotations

from jobrelay.domain.errors import JobrelayError


class StartupError(JobrelayError):
    """A component could not start; the message says what to do."""
