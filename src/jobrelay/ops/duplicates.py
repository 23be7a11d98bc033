"""Reconcile legacy active duplicates before the partial unique index can exist.

Dry run returns the plan; apply executes it in one transaction (rows locked while planned,
so a concurrent change cannot slip between plan and apply) and nothing is ever deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from jobrelay.db.pool import Connection, transaction
from jobrelay.domain.duplicates import (
    ActiveRow,
    DuplicatePolicy,
    ReconcilePlan,
    plan_reconciliation,
)
from jobrelay.domain.jobs import ConflictPolicy
from jobrelay.jobs.registry import Registry
from jobrelay.ops.control import SQL


def registry_policies(registry: Registry) -> Callable[[str], DuplicatePolicy]:
    """Each type's conflict policy from the job registry; legacy types it does not know
    keep one row (`ignore`)."""

    def policy_for(job_type: str) -> DuplicatePolicy:
        entry = registry.get(job_type)
        if entry is None:
            return DuplicatePolicy(ConflictPolicy.IGNORE)
        merge_keys = (entry.merge_field,) if entry.merge_field else ()
        return DuplicatePolicy(entry.policy, merge_keys=merge_keys)

    return policy_for


async def reconcile_duplicates(
    pool: AsyncConnectionPool[Connection],
    policy_for: Callable[[str], DuplicatePolicy],
    *,
    apply: bool,
) -> ReconcilePlan:
    """Plan (and with `apply`, carry out) the reconciliation of every duplicate group."""
    async with transaction(pool) as conn:
        rows = await (await conn.execute(SQL.active_duplicates)).fetchall()
        plan = plan_reconciliation((_active_row(r) for r in rows), policy_for)
        if not apply:
            return plan
        for group in plan.groups:
            if group.merged_payload is not None:
                await conn.execute(
                    SQL.set_survivor_payload,
                    {"id": group.survivor, "payload": Jsonb(dict(group.merged_payload))},
                )
            async with conn.cursor() as cur:
                await cur.executemany(
                    SQL.cancel_duplicate,
                    [{"id": loser, "reason": group.reason} for loser in group.cancelled],
                )
    return plan


async def duplicate_group_count(pool: AsyncConnectionPool[Connection]) -> int:
    """How many (type, dedupe_key) groups have more than one active row."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SQL.duplicate_count)).fetchone()
    assert row is not None
    return int(str(row["duplicates"]))


def plan_as_json(plan: ReconcilePlan) -> dict[str, Any]:
    return {
        "groups": len(plan.groups),
        "cancelled": plan.cancelled_count,
        "byType": plan.by_type(),
        "plan": [
            {
                "type": g.type,
                "dedupeKey": g.dedupe_key,
                "policy": g.policy.value,
                "survivor": g.survivor,
                "cancelled": list(g.cancelled),
                "reason": g.reason,
                "mergedPayload": g.merged_payload,
            }
            for g in plan.groups
        ],
    }


def _active_row(row: dict[str, Any]) -> ActiveRow:
    return ActiveRow(
        id=str(row["id"]),
        type=str(row["type"]),
        dedupe_key=str(row["dedupe_key"]),
        status=str(row["status"]),
        revision=int(row["revision"]),
        payload=row["payload"] if isinstance(row["payload"], dict) else {},
        created_at=row["created_at"],
    )
