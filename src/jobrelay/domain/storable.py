"""Which JSON values PostgreSQL can store, decided before they reach SQL.

A `jsonb` or `text` column refuses a NUL character (`\\u0000`) anywhere in a string or a
key, a lone UTF-16 surrogate cannot be encoded as UTF-8, and JSON has no NaN or infinity.
A batched write that meets one of them fails as a whole, so the worker checks a handler's
result here first and fails only that job, naming the place (`$.text`, `$.items[3]`).

Pure and stdlib-only, like the rest of `domain`.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Nesting deeper than this is refused rather than walked (PostgreSQL's own jsonb parser
# stops at a stack depth well above it).
_MAX_DEPTH = 1000


def _key_path(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone surrogate"
    return None


def _value_problem(value: Any, path: str, depth: int) -> str | None:
    """The first unstorable part of `value`, walking depth first in document order."""
    if depth > _MAX_DEPTH:
        return f"nested deeper than {_MAX_DEPTH} levels at {path}"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"non-finite number at {path}"
    if isinstance(value, str):
        problem = _text_problem(value)
        return None if problem is None else f"{problem} at {path}"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} is not a string at {path}"
            problem = _text_problem(key)
            if problem is not None:
                return f"{problem} in the key {key!a} at {path}"
            found = _value_problem(item, _key_path(path, key), depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _value_problem(item, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
        return None
    return f"{type(value).__name__} is not a JSON value at {path}"


def unstorable(value: Any, *, limit_bytes: int | None = None) -> str | None:
    """Why `value` cannot be stored as `jsonb` (None: it can), naming where: `NUL
    character at $.text`, `lone surrogate in a key at $.a`, `result is 2000000 bytes of
    JSON; the limit is 1048576 bytes`. `limit_bytes` bounds the stored JSON's UTF-8 size."""
    problem = _value_problem(value, "$", 0)
    if problem is not None or limit_bytes is None:
        return problem
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limit_bytes:
        return f"{size} bytes of JSON; the limit is {limit_bytes} bytes"
    return None


def storable_text(text: str) -> str:
    """`text` as PostgreSQL can store it in a text column: a NUL becomes `\\0` and a lone
    surrogate its escape (an error text from a queue or a handler is not ours to trust)."""
    return text.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
