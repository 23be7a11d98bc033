"""The child lifecycle: the one owner of every write to `page_import`, `code2des` and
`code2wf`, and of the typed views every reader gets (`views`).

Transitions, each one statement in `children/queries/`:

| transition | function | writer |
|---|---|---|
| create a batch's children (COPY) | `batch.copy_batch_children` | batch creation |
| cancel a batch's processing children | `batch.cancel_batch_children` | cancel, delete |
| one step of a background cancel | `batch.settle_cancel_children` | relay sweeper |
| fail the children of failed items | `batch.fail_batch_children` | relay |
| soft delete a batch's children | `batch.delete_batch_children` | batch delete |
| end a child from a worker outcome | `outcomes.LIFECYCLES[kind].apply` | webhook |
| create a generation | `code2wf.insert` | Code2WF service |
| fail a generation not dispatched | `code2wf.fail_dispatch`, `fail_orphans` | jobs worker |
| record a placement, soft delete | `code2wf.materialize`, `soft_delete` | Code2WF service |

Every function takes the caller's connection, so the write joins the caller's transaction
(a batch's children and items commit together; a generation and its dispatch job too). A
statement here never changes a `batch_item`: the count triggers of migration 0012 see one
table each, so the batch part runs its item statement beside the child one. This package
imports neither `jobrelay.batches` nor `jobrelay.generations`: it is below both.
"""
