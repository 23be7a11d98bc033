"""Baseline for the enqueue phases: a bare INSERT of the payload into a one-index table.

Not a queue: no dedupe, no trigger, no worker. It is the floor of a durable enqueue on this
server and client stack (psycopg, one autocommit statement per job, or one statement per
1000 jobs), measured in the same run as the queues (bench/peers/enqueue_paired.py), so a
reader can see how much of an enqueue is the commit itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


class Adapter:
    name = "bare_insert"
    supports_bulk = True

    @staticmethod
    def version() -> str:
        return psycopg.__version__

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def install(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            await conn.execute(
                "CREATE TABLE bare (id bigserial PRIMARY KEY, payload jsonb NOT NULL)"
            )

    async def open(self) -> None:
        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def close(self) -> None:
        await self.conn.close()

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        await self.conn.execute("INSERT INTO bare (payload) VALUES (%s)", (Jsonb(payload),))

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        await self.conn.execute(
            "INSERT INTO bare (payload) SELECT * FROM jsonb_array_elements(%s::jsonb)",
            (json.dumps(payloads),),
        )

    async def run_worker(self, concurrency: int, handler: Any, stop: asyncio.Event) -> None:
        raise NotImplementedError("bare_insert is a baseline for the enqueue phases only")
