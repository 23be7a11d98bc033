"""Plan the reconciliation of legacy active duplicates, per the job type's conflict policy.

Pure: rows in, plan out. The seed forbids silently keeping one row and deleting the rest, so
every loser is cancelled with a reason naming its survivor, and merge-type payloads are
unioned into the survivor first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobrelay.domain.jobs import ConflictPolicy


@dataclass(frozen=True, slots=True)
class DuplicatePolicy:
    """How one job type resolves two active jobs with the same dedupe key."""

    policy: ConflictPolicy
    merge_keys: tuple[str, ...] = ()  # list fields unioned by MERGE (e.g. "mediaIds")


@dataclass(frozen=True, slots=True)
class ActiveRow:
    id: str
    type: str
    dedupe_key: str
    status: str
    revision: int
    payload: Mapping[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One (type, dedupe_key) group: the survivor, its new payload if merged, the losers."""

    type: str
    dedupe_key: str
    policy: ConflictPolicy
    survivor: str
    cancelled: tuple[str, ...]
    reason: str
    merged_payload: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ReconcilePlan:
    groups: tuple[GroupPlan, ...] = field(default_factory=tuple)

    @property
    def cancelled_count(self) -> int:
        return sum(len(g.cancelled) for g in self.groups)

    def by_type(self) -> dict[str, dict[str, int]]:
        """Per type: groups, rows cancelled, rows merged into a survivor."""
        summary: dict[str, dict[str, int]] = {}
        for group in self.groups:
            entry = summary.setdefault(group.type, {"groups": 0, "cancelled": 0, "merged": 0})
            entry["groups"] += 1
            entry["cancelled"] += len(group.cancelled)
            if group.merged_payload is not None:
                entry["merged"] += len(group.cancelled)
        return summary


def _payload_revision(row: ActiveRow) -> int:
    value = row.payload.get("revision")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def choose_survivor(rows: Sequence[ActiveRow], policy: ConflictPolicy) -> ActiveRow:
    """The running row, else the oldest; for SUPERSEDE the highest request revision first."""

    def running_then_oldest(row: ActiveRow) -> tuple[int, datetime, str]:
        return (0 if row.status == "in_progress" else 1, row.created_at, row.id)

    if policy is ConflictPolicy.SUPERSEDE:
        top = max(max(r.revision, _payload_revision(r)) for r in rows)
        rows = [r for r in rows if max(r.revision, _payload_revision(r)) == top]
    return min(rows, key=running_then_oldest)


def merge_payloads(
    survivor: ActiveRow, others: Iterable[ActiveRow], keys: Sequence[str]
) -> dict[str, Any]:
    """The survivor's payload with every `keys` list unioned (order kept, no element lost)."""
    merged = dict(survivor.payload)
    for key in keys:
        seen: list[Any] = []
        for row in (survivor, *others):
            values = row.payload.get(key)
            for value in values if isinstance(values, list) else []:
                if value not in seen:
                    seen.append(value)
        merged[key] = seen
    return merged


def plan_reconciliation(
    rows: Iterable[ActiveRow], policy_for: Callable[[str], DuplicatePolicy]
) -> ReconcilePlan:
    """Group active rows by (type, dedupe_key) and plan each group with more than one row."""
    groups: dict[tuple[str, str], list[ActiveRow]] = {}
    for row in rows:
        groups.setdefault((row.type, row.dedupe_key), []).append(row)
    plans: list[GroupPlan] = []
    for (job_type, key), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        rule = policy_for(job_type)
        survivor = choose_survivor(members, rule.policy)
        losers = tuple(r for r in members if r.id != survivor.id)
        merged = None
        verb = "duplicate of"
        if rule.policy is ConflictPolicy.MERGE and rule.merge_keys:
            merged = merge_payloads(survivor, losers, rule.merge_keys)
            verb = "merged into"
        elif rule.policy is ConflictPolicy.SUPERSEDE:
            verb = "superseded by"
        plans.append(
            GroupPlan(
                type=job_type,
                dedupe_key=key,
                policy=rule.policy,
                survivor=survivor.id,
                cancelled=tuple(r.id for r in losers),
                reason=f"{verb} {survivor.id}",
                merged_payload=merged,
            )
        )
    return ReconcilePlan(groups=tuple(plans))
