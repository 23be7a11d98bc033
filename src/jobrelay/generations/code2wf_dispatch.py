"""The `code2wf.dispatch` job: send one generation's worker message to SQS.

Created with its `code2wf` row in one transaction. Each attempt reads the row, skips a
generation that is no longer processing (an earlier attempt's message already produced an
outcome, or it was deleted), and sends the message built from the row and its Page Import's
result location. Transient send failures retry with backoff; on the last attempt the job
completes having failed the generation with a safe message, in the completing transaction.

A dispatch job can also end without running to that point (its lease expired on the last
attempt, an operator cancelled it): the sweep `code2wf.orphans`, run by every worker, fails
the generations such jobs left processing.
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool
from pydantic import Field

from jobrelay import tracing
from jobrelay.aws.sender import MessageSender, OutgoingMessage
from jobrelay.children import code2wf as rows
from jobrelay.children.views import DispatchSource
from jobrelay.db.pool import Connection
from jobrelay.domain.batch_status import ChildStatus
from jobrelay.domain.jobs import Complete, Outcome, Retry
from jobrelay.domain.retry import RetryPolicy
from jobrelay.generations.code2wf import fail_orphaned_generations
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload
from jobrelay.protocol import Code2WfMessage

TYPE = "code2wf.dispatch"


class Code2WfDispatch(JobPayload):
    code2wf_id: str = Field(alias="code2wfId", min_length=1, max_length=255)


DEFAULT_RETRY = RetryPolicy(max_attempts=5, base_s=1.0, cap_s=60.0)


ORPHAN_SWEEP_INTERVAL_S = 10.0


def job_types(send: MessageSender | None = None, *, retry: RetryPolicy = DEFAULT_RETRY) -> JobTypes:
    """`code2wf.dispatch` and the orphan sweep; without a sender (a process that cannot
    reach SQS) every attempt retries with the reason, so a worker that can dispatch picks
    it up."""
    group = JobTypes()

    @group.job_type(TYPE, retry=retry)
    async def handle(ctx: JobContext[Code2WfDispatch]) -> Outcome:
        pool = ctx.pool
        if pool is None or send is None:
            return Retry("this worker cannot dispatch Code2WF (no SQS configured)")
        code2wf_id = ctx.payload.code2wf_id
        async with pool.connection() as conn:
            source = await rows.dispatch_source(conn, code2wf_id)
        if (
            source is None
            or source.deleted
            or source.generation.status is not ChildStatus.PROCESSING
        ):
            return Complete(result={"dispatched": False, "reason": "not processing"})
        if not source.page_import_result_url:
            return _give_up(code2wf_id, "the page import has no result to build from")
        message = _message(source)
        outgoing = OutgoingMessage(
            item_id=code2wf_id,
            child_id=code2wf_id,
            attempt=None,
            body=message.model_dump_json(),
            # the dispatch job's run span: the worker's handling continues this trace
            traceparent=tracing.current_traceparent(),
        )
        try:
            result = await send.send_batch([outgoing])
        except Exception as exc:
            failure = type(exc).__name__  # the class only: the row keeps a safe message
        else:
            message_id = result.accepted.get(code2wf_id)
            if message_id is not None:
                return Complete(result={"dispatched": True, "messageId": message_id})
            failure = "rejected by SQS"
        reason = f"sending to SQS failed: {failure}"
        if ctx.job.attempt_count >= ctx.job.max_attempts:
            return _give_up(
                code2wf_id, f"dispatch failed after {ctx.job.attempt_count} attempts ({reason})"
            )
        return Retry(reason)

    group.sweep("code2wf.orphans", every_s=ORPHAN_SWEEP_INTERVAL_S)(_fail_orphans)
    return group


async def _fail_orphans(pool: AsyncConnectionPool[Connection]) -> int:
    return len(await fail_orphaned_generations(pool))


def _message(source: DispatchSource) -> Code2WfMessage:
    generation = source.generation
    assert source.page_import_result_url is not None
    return Code2WfMessage(
        code2wf_id=generation.id,
        attempt=generation.attempt,
        organization_id=generation.organization_id,
        project_id=generation.project_id,
        page_import_id=generation.page_import_id,
        figma_file_key=generation.figma_file_key,
        screen_id=generation.screen_id,
        placement_target=generation.placement_target,
        page_import_result_url=source.page_import_result_url,
    )


def _give_up(code2wf_id: str, message: str) -> Complete:
    async def fail_generation(conn: Connection) -> None:
        await rows.fail_dispatch(conn, code2wf_id, error_message=message)

    return Complete(result={"dispatched": False, "error": message}, outputs=fail_generation)
