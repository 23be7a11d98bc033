"""`SqsSender`: the `MessageSender` port (`jobrelay.aws.sender`) over one SQS client.

The client is opened on the first send (a process that never sends never builds one) and
kept until `aclose`, whatever the number of messages: creating an aiobotocore client loads
the service model and opens a new HTTP connection pool, which per message would cost more
than the send. The queue's URL is resolved once, from its name when only the name is known.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING

from aiobotocore.config import AioConfig

from jobrelay.aws.clients import AwsEndpoint, sqs_client, unreachable_reason
from jobrelay.aws.sender import OutgoingMessage, QueueUnreachable, SendResult

if TYPE_CHECKING:  # the published stubs are a dev dependency: annotations only
    from types_aiobotocore_sqs import SQSClient
    from types_aiobotocore_sqs.type_defs import (
        MessageAttributeValueTypeDef,
        SendMessageBatchRequestEntryTypeDef,
    )


class SqsSender:
    """Sends to one queue, named by `queue_name` or `queue_url` (exactly one), over one
    client. `max_connections` sizes the client's HTTP pool (one connection per call in
    flight: the relay's `max_in_flight`); `config` overrides other client settings."""

    def __init__(
        self,
        endpoint: AwsEndpoint,
        *,
        queue_name: str | None = None,
        queue_url: str | None = None,
        max_connections: int | None = None,
        config: AioConfig | None = None,
    ) -> None:
        if (queue_name is None) == (queue_url is None):
            raise ValueError("give exactly one of queue_name and queue_url")
        self._endpoint = endpoint
        self._queue_name = queue_name
        self._queue_url = queue_url
        if max_connections is not None:
            pool = AioConfig(max_pool_connections=max_connections)
            config = pool if config is None else config.merge(pool)
        self._config = config
        self._client: SQSClient | None = None
        self._resources = AsyncExitStack()
        self._opening = asyncio.Lock()

    async def __aenter__(self) -> SqsSender:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client (a later send opens a new one)."""
        async with self._opening:
            self._client = None
            await self._resources.aclose()

    async def queue_url(self) -> str:
        """The queue's URL, looked up once (raises while SQS does not answer)."""
        client = await self._open()
        if self._queue_url is None:
            assert self._queue_name is not None
            response = await client.get_queue_url(QueueName=self._queue_name)
            self._queue_url = str(response["QueueUrl"])
        return self._queue_url

    @property
    def endpoint(self) -> str:
        """The endpoint it sends to, as logs name it."""
        return self._endpoint.describe()

    async def send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        """One `SendMessageBatch` call (see the port's contract): an unreachable queue
        raises `QueueUnreachable`."""
        try:
            return await self._send_batch(messages)
        except Exception as exc:
            reason = unreachable_reason(exc)
            if reason is None:
                raise
            raise QueueUnreachable(self.endpoint, reason) from exc

    async def _send_batch(self, messages: Sequence[OutgoingMessage]) -> SendResult:
        client = await self._open()
        queue_url = await self.queue_url()
        entries: list[SendMessageBatchRequestEntryTypeDef] = []
        for index, message in enumerate(messages):
            entry: SendMessageBatchRequestEntryTypeDef = {
                "Id": str(index),
                "MessageBody": message.body,
            }
            attributes: dict[str, MessageAttributeValueTypeDef] = {}
            if message.attempt is not None:
                attributes["dispatch_attempt"] = {
                    "DataType": "Number",
                    "StringValue": str(message.attempt),
                }
            if message.traceparent is not None:
                attributes["traceparent"] = {
                    "DataType": "String",
                    "StringValue": message.traceparent,
                }
            if attributes:
                entry["MessageAttributes"] = attributes
            entries.append(entry)
        response = await client.send_message_batch(QueueUrl=queue_url, Entries=entries)
        return SendResult(
            accepted={
                messages[int(ok["Id"])].item_id: str(ok["MessageId"])
                for ok in response.get("Successful", [])
            },
            failed={
                messages[int(failure["Id"])].item_id: (
                    f"{failure.get('Code', 'error')}: {failure.get('Message', 'rejected by SQS')}"
                )
                for failure in response.get("Failed", [])
            },
        )

    async def _open(self) -> SQSClient:
        if self._client is not None:
            return self._client
        async with self._opening:
            if self._client is None:
                self._client = await self._resources.enter_async_context(
                    sqs_client(self._endpoint, config=self._config)
                )
            return self._client
