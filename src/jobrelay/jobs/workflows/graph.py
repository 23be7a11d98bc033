"""A workflow as its caller builds it: named steps, each a job, and who waits for whom.

    workflow = (
        Workflow("import")
        .step("fetch", "page.fetch", {"url": url})
        .step("render", "page.render", {}, after=["fetch"], on_dependency_failure="skip")
    )

`problems()` checks the graph alone (names, dependencies, cycles, size) and names every bad
field by its path in the HTTP body (`steps.3.after.0`); the payloads are checked against
their types when the workflow is created (`jobs.workflows.store.create_workflow`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jobrelay.domain.errors import FieldError

DEFAULT_MAX_STEPS = 10_000
NAME_MAX_CHARS = 200


class DependencyFailure(StrEnum):
    """What a step does when one of its dependencies fails or is cancelled."""

    CANCEL = "cancel"  # it is cancelled too, and so on down the graph (the default)
    SKIP = "skip"  # it ends skipped without running; its dependents count it as ended well
    RUN = "run"  # it runs anyway and reads which dependencies failed, and why


@dataclass(frozen=True, slots=True)
class Step:
    """One step: a job of `type` with `payload`, run after the steps named in `after`."""

    name: str
    type: str
    payload: Mapping[str, Any]
    after: tuple[str, ...] = ()
    on_dependency_failure: DependencyFailure = DependencyFailure.CANCEL
    priority: int | None = None
    max_attempts: int | None = None


@dataclass(slots=True)
class Workflow:
    """A DAG of steps, built with `step()` and created with `create_workflow`."""

    name: str
    fairness_key: str | None = None
    steps: list[Step] = field(default_factory=list)

    def step(
        self,
        name: str,
        type: str,
        payload: Mapping[str, Any],
        *,
        after: Sequence[str] = (),
        on_dependency_failure: DependencyFailure | str = DependencyFailure.CANCEL,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> Workflow:
        """Add a step (checked when the workflow is created); returns the workflow."""
        self.steps.append(
            Step(
                name,
                type,
                payload,
                tuple(after),
                _policy(on_dependency_failure),
                priority,
                max_attempts,
            )
        )
        return self

    def problems(self, *, max_steps: int = DEFAULT_MAX_STEPS) -> list[FieldError]:
        """What is wrong with the graph, each with its field path; empty when it is a DAG
        of uniquely named steps within `max_steps`."""
        errors: list[FieldError] = []
        if not 1 <= len(self.name) <= NAME_MAX_CHARS:
            errors.append(FieldError("name", f"must be 1 to {NAME_MAX_CHARS} characters"))
        if not self.steps:
            errors.append(FieldError("steps", "a workflow needs at least one step"))
        if len(self.steps) > max_steps:
            errors.append(
                FieldError(
                    "steps",
                    f"{len(self.steps)} steps; the limit is {max_steps} "
                    "(JOBRELAY_WORKFLOWS_MAX_STEPS)",
                )
            )
            return errors
        index: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            if not 1 <= len(step.name) <= NAME_MAX_CHARS:
                errors.append(
                    FieldError(f"steps.{i}.name", f"must be 1 to {NAME_MAX_CHARS} characters")
                )
            elif step.name in index:
                errors.append(FieldError(f"steps.{i}.name", f"duplicate step name {step.name!r}"))
            else:
                index[step.name] = i
        for i, step in enumerate(self.steps):
            for j, dependency in enumerate(step.after):
                if dependency not in index:
                    errors.append(
                        FieldError(f"steps.{i}.after.{j}", f"no step is named {dependency!r}")
                    )
                elif dependency == step.name:
                    errors.append(
                        FieldError(f"steps.{i}.after.{j}", "a step cannot wait on itself")
                    )
            if len(set(step.after)) != len(step.after):
                errors.append(FieldError(f"steps.{i}.after", "names a dependency twice"))
        if not errors:
            cycle = _cycle(self.steps, index)
            if cycle is not None:
                errors.append(
                    FieldError(
                        f"steps.{index[cycle[0]]}.after",
                        "the steps wait on each other in a cycle: " + " -> ".join(cycle),
                    )
                )
        return errors


def _policy(value: DependencyFailure | str) -> DependencyFailure:
    try:
        return DependencyFailure(value)
    except ValueError:
        allowed = ", ".join(p.value for p in DependencyFailure)
        raise ValueError(f"on_dependency_failure must be one of {allowed}, got {value!r}") from None


def _cycle(steps: Sequence[Step], index: Mapping[str, int]) -> list[str] | None:
    """One cycle of the graph as step names (first repeated last), or None: a depth-first
    walk without recursion, so a 10,000-step chain does not hit Python's stack limit."""
    state = [0] * len(steps)  # 0 unseen, 1 on the current path, 2 done
    for start in range(len(steps)):
        if state[start]:
            continue
        path: list[int] = []
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            node, edge = stack.pop()
            if edge == 0:
                state[node] = 1
                path.append(node)
            after = steps[node].after
            if edge < len(after):
                stack.append((node, edge + 1))
                nxt = index[after[edge]]
                if state[nxt] == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    return [steps[k].name for k in cycle]
                if state[nxt] == 0:
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()
    return None
