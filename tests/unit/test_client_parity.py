"""The sync and async Python clients are kept by hand as pairs of methods: a method added to
one and not the other, or a parameter that differs, fails here rather than in a user's code."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from jobrelay.client import _clients as clients
from jobrelay.client._clients import AsyncJobrelayClient, JobrelayClient

# The async spelling of a sync method where it is not the same name (httpx's own convention).
ASYNC_NAME = {
    "__init__": "__init__",
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
    "close": "aclose",
}
# What a sync annotation reads as on the async side.
ASYNC_TYPE = {"httpx.Client": "httpx.AsyncClient", "JobrelayClient": "AsyncJobrelayClient"}


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def _as_async(annotation: str) -> str:
    pattern = r"\b(" + "|".join(re.escape(name) for name in ASYNC_TYPE) + r")\b"
    return re.sub(pattern, lambda m: ASYNC_TYPE[m.group(1)], annotation)


def _resolved(annotation: Any) -> Any:
    """An annotation as a type (the module's are strings under `from __future__`)."""
    if annotation is inspect.Signature.empty or not isinstance(annotation, str):
        return annotation
    # The strings are the client module's own source, evaluated where they were written.
    return eval(annotation, vars(clients))


def _shape(function: Callable[..., Any], *, sync: bool) -> list[tuple[str, Any, Any, Any]]:
    """(name, kind, default, type) of every parameter, then the return type."""
    signature = inspect.signature(function)

    def typed(annotation: Any) -> Any:
        if sync and isinstance(annotation, str):
            annotation = _as_async(annotation)
        return _resolved(annotation)

    shape = [
        (p.name, p.kind, p.default, typed(p.annotation)) for p in signature.parameters.values()
    ]
    return [*shape, ("return", None, None, typed(signature.return_annotation))]


def _pairs() -> list[tuple[str, str]]:
    names = [*ASYNC_NAME.items()]
    names += [(name, ASYNC_NAME.get(name, name)) for name in _public(JobrelayClient)]
    return list(dict.fromkeys(names))


def test_both_clients_have_the_same_public_methods() -> None:
    sync = {ASYNC_NAME.get(name, name) for name in _public(JobrelayClient)}
    asynchronous = set(_public(AsyncJobrelayClient))
    assert not sync - asynchronous, f"only the sync client has {sorted(sync - asynchronous)}"
    assert not asynchronous - sync, f"only the async client has {sorted(asynchronous - sync)}"


@pytest.mark.parametrize(("sync_name", "async_name"), _pairs())
def test_a_method_pair_has_the_same_signature(sync_name: str, async_name: str) -> None:
    sync = getattr(JobrelayClient, sync_name)
    asynchronous = getattr(AsyncJobrelayClient, async_name)
    assert _shape(sync, sync=True) == _shape(asynchronous, sync=False)
    assert not inspect.iscoroutinefunction(sync)
    if async_name != "__init__":
        assert inspect.iscoroutinefunction(asynchronous), f"{async_name} is not a coroutine"


def test_the_comparison_sees_a_parameter_that_differs() -> None:
    """A pair that differs only in a default fails `_shape`'s comparison."""

    def sync(self: object, batch_id: str, *, limit: int = 100) -> None: ...
    async def asynchronous(self: object, batch_id: str, *, limit: int = 50) -> None: ...

    assert _shape(sync, sync=True) != _shape(asynchronous, sync=False)
