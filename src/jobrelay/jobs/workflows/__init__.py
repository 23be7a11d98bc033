"""Workflows: a DAG of steps, each step a job of a registered type, released by the
transaction that ends its last dependency.

- `graph`: the builder (`Workflow`, `Step`, `DependencyFailure`) and the checks of a graph.
- `store`: creating a workflow (one transaction, nothing stored on bad input) and reading
  it back with its derived status.
- `release`: what ending a step does to the steps that wait on it (called by
  `jobs.claims.settle_many`), and the repair of the worker's maintenance loop.

Submodules are imported by name: `release` sits under the claims, `store` above the
enqueuer, so this package imports neither on its own.
"""
