"""Planning the reconciliation of legacy duplicates, per conflict policy (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobrelay.domain.duplicates import (
    ActiveRow,
    ConflictPolicy,
    DuplicatePolicy,
    plan_reconciliation,
)

T0 = datetime(2026, 7, 18, tzinfo=UTC)


def row(id_: str, status: str = "pending", minutes: int = 0, **payload: object) -> ActiveRow:
    return ActiveRow(
        id=id_,
        type="t",
        dedupe_key="k",
        status=status,
        revision=1,
        payload=payload,
        created_at=T0 + timedelta(minutes=minutes),
    )


def plan_of(rows: list[ActiveRow], rule: DuplicatePolicy):  # type: ignore[no-untyped-def]
    groups = plan_reconciliation(rows, lambda _: rule).groups
    assert len(groups) == 1
    return groups[0]


def test_ignore_keeps_the_running_row_over_older_pending_ones() -> None:
    group = plan_of(
        [row("a", minutes=0), row("b", "in_progress", minutes=5), row("c", minutes=9)],
        DuplicatePolicy(ConflictPolicy.IGNORE),
    )
    assert group.survivor == "b"
    assert set(group.cancelled) == {"a", "c"}
    assert group.reason == "duplicate of b"
    assert group.merged_payload is None


def test_ignore_keeps_the_oldest_when_nothing_runs() -> None:
    group = plan_of(
        [row("late", minutes=9), row("early", minutes=1)], DuplicatePolicy(ConflictPolicy.IGNORE)
    )
    assert (group.survivor, group.cancelled) == ("early", ("late",))


def test_supersede_keeps_the_highest_request_revision() -> None:
    group = plan_of(
        [row("old", "in_progress", minutes=0, revision=2), row("new", minutes=9, revision=7)],
        DuplicatePolicy(ConflictPolicy.SUPERSEDE),
    )
    assert group.survivor == "new"
    assert group.reason == "superseded by new"


def test_merge_unions_every_list_into_the_survivor_in_order() -> None:
    group = plan_of(
        [
            row("a", minutes=0, mediaIds=["x", "y"]),
            row("b", minutes=1, mediaIds=["y", "z"]),
            row("c", minutes=2),
            row("d", minutes=3, mediaIds=None),
        ],
        DuplicatePolicy(ConflictPolicy.MERGE, merge_keys=("mediaIds",)),
    )
    assert group.survivor == "a"
    assert group.merged_payload == {"mediaIds": ["x", "y", "z"]}
    assert group.reason == "merged into a"
    assert set(group.cancelled) == {"b", "c", "d"}


def test_single_rows_are_not_planned_and_groups_are_per_type_and_key() -> None:
    rows = [
        ActiveRow("1", "t", "k", "pending", 1, {}, T0),
        ActiveRow("2", "u", "k", "pending", 1, {}, T0),
        ActiveRow("3", "t", "j", "pending", 1, {}, T0),
    ]
    plan = plan_reconciliation(rows, lambda _: DuplicatePolicy(ConflictPolicy.IGNORE))
    assert plan.groups == ()
