"""`Idempotency-Key` on the POSTs that create (batches, Code2WF generations, jobs).

A route builds its answer in a `Creation` (given the connection to write on) and returns
`await created_once(...)`: without a key the creation runs as before; with one it runs
through `jobrelay.idempotency.IdempotentRequests`, so a repeat of the same request returns
the first answer (marked `Idempotent-Replayed: true`) and another request with the same key
is a 422 naming `Idempotency-Key`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from jobrelay.auth.tokens import Caller
from jobrelay.bootstrap import Services
from jobrelay.idempotency import HEADER, Answer, Creation, fingerprint

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=255,
        description="Any unique string (a UUID): the same request sent again with the same "
        "key within 24 hours returns the first answer instead of creating a second resource "
        "(`Idempotent-Replayed: true`); another request with the key is a 422",
    ),
]
REPLAYED = "Idempotent-Replayed"


def answer(model: BaseModel, status_code: int) -> Answer:
    """A route's answer as stored for repeats: the model as JSON on the wire."""
    return Answer(status_code=status_code, body=model.model_dump(mode="json", by_alias=True))


async def created_once(
    request: Request,
    services: Services,
    caller: Caller,
    key: str | None,
    body: BaseModel,
    create: Creation,
) -> JSONResponse:
    """The answer of `create`, at most once per `key` of `caller` (see the module)."""
    if key is None:
        result = await create(None)
    else:
        sent = body.model_dump(mode="json", by_alias=True)
        result = await services.idempotency.run_once(
            caller_sub=caller.sub,
            key=key,
            fingerprint=fingerprint(request.method, request.url.path, sent),
            create=create,
        )
    response = JSONResponse(dict(result.body), status_code=result.status_code)
    if result.replayed:
        response.headers[REPLAYED] = "true"
    return response
