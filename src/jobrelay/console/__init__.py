"""The operator console's data layer: read-only views of the jobs engine and the batch
outbox (overview, health) and the database-side metrics the API exports on `/metrics`.

Pages and JSON endpoints call `ConsoleService`; they never run SQL themselves.
"""

from jobrelay.console.service import (
    BatchProgress,
    ClassLoad,
    ConsoleService,
    ControlFlags,
    FinishedCounts,
    Health,
    LeaseLosses,
    OldestTransaction,
    Overview,
    RelayLag,
    TableHealth,
    TypeStatusCount,
)

__all__ = [
    "BatchProgress",
    "ClassLoad",
    "ConsoleService",
    "ControlFlags",
    "FinishedCounts",
    "Health",
    "LeaseLosses",
    "OldestTransaction",
    "Overview",
    "RelayLag",
    "TableHealth",
    "TypeStatusCount",
]
