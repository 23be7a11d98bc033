"""The enqueue row: a job's fields as every enqueue statement reads them, declared once.

`INPUT_FIELDS` is the database type `INPUT_TYPE` field for field, in its order: the keys of
the JSON document (`document`, read by `jsonb_populate_recordset`), the parameters of
`enqueue_one.sql` (`parameters`) and, those with `copied`, the columns of
`enqueue_copy.sql` (`copy_line`). `EnqueueRow.fields` gives the values in that order, and the
three encodings are built from it, so they cannot drift apart. What the declaration cannot
generate (the type in the database, the column lists of the SQL statements) is checked
against it by `tests/integration/test_job_columns.py`.

A new job column: AGENTS.md has the recipe (this declaration, a migration through
`jobrelay.migrations.job_columns`, the column lists of `jobs/queries/enqueue_*.sql`).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobrelay.jobs.registry import JobType, payload_dict


@dataclass(frozen=True, slots=True)
class InputField:
    """One field of the enqueue row: its name (the type's attribute, the document's key, the
    parameter's name), its SQL type in `INPUT_TYPE`, whether a COPY writes it as a column of
    `jobs` of the same name (`delay_s` and `run_at` only compute `available_at`, which a
    copied job takes by default), and whether its value is `plain` in COPY text: never NULL
    and never in need of an escape (ids, numbers, the role), so written as it is."""

    name: str
    sql_type: str
    copied: bool = True
    plain: bool = False


INPUT_TYPE = "jobrelay_job_input_v3"
INPUT_FIELDS = (
    InputField("id", "uuid", plain=True),
    InputField("type", "text"),
    InputField("payload", "jsonb"),
    InputField("dedupe_key", "text"),
    InputField("revision", "bigint", plain=True),
    InputField("source_key", "text"),
    InputField("concurrency_class", "text"),
    InputField("priority", "smallint", plain=True),
    InputField("max_attempts", "integer", plain=True),
    InputField("delay_s", "double precision", copied=False),
    InputField("parent_id", "uuid"),
    InputField("role", "text", plain=True),
    InputField("run_at", "timestamp with time zone", copied=False),
    InputField("fairness_key", "text"),
    InputField("traceparent", "text"),
    InputField("workflow_id", "uuid"),
)
NAMES = tuple(f.name for f in INPUT_FIELDS)
COPY_NAMES = tuple(f.name for f in INPUT_FIELDS if f.copied)
# The columns of `jobs` the engine fills and changes itself (claims, leases, outcomes,
# timestamps): every other column of `jobs` comes from an input field. A new column is one
# or the other; the schema test fails until it is declared.
ENGINE_COLUMNS = frozenset(
    {
        "status",
        "available_at",
        "attempt_count",
        "claim_token",
        "claimed_by",
        "claimed_at",
        "lease_expires_at",
        "heartbeat_at",
        "result",
        "last_error",
        "failure_kind",
        "created_at",
        "updated_at",
        "finished_at",
        "class_slot",
    }
)

# One encoder for compact JSON: json.dumps with options builds a new encoder on every call.
_COMPACT = json.JSONEncoder(separators=(",", ":"))
# The document's encoder: ids and run times as their text (the payload is spliced in as is).
_DOCUMENT = json.JSONEncoder(separators=(",", ":"), default=str)
# COPY's text format: a backslash starts an escape, tab and newline end a field and a row.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@dataclass(slots=True)
class EnqueueRow:
    """One validated job on its way into `jobs` (built by `Enqueuer.prepare`)."""

    id: uuid.UUID
    job_type: JobType[Any]
    payload: dict[str, Any] | None  # the stored payload as a dict, built when first needed
    dedupe_key: str | None
    revision: int
    source_key: str | None
    concurrency_class: str
    priority: int
    max_attempts: int
    delay_s: float | None  # None: never available (a waiting parent)
    parent_id: uuid.UUID | None
    model: Any = None
    run_at: dt.datetime | None = None  # available then (instead of now + delay_s)
    fairness_key: str | None = None
    # The stored payload as JSON text (what the size limit counts); None once a fold changed
    # `payload`.
    payload_json: str | None = None
    traceparent: str | None = None  # the enqueue's trace context (`jobs.traces`)
    workflow_id: uuid.UUID | None = None  # the workflow it is a step of (`jobs.workflows`)

    @property
    def key(self) -> tuple[str, str] | None:
        return None if self.dedupe_key is None else (self.job_type.name, self.dedupe_key)

    def stored_payload(self) -> dict[str, Any]:
        """The payload as stored, as a dict (a bulk COPY needs only `payload_json`)."""
        if self.payload is None:
            self.payload = payload_dict(self.model)
        return self.payload

    def stored_json(self) -> str:
        """The payload as stored, as compact JSON text: the text the size limit measured,
        or the folded dict encoded again."""
        if self.payload_json is None:
            return _COMPACT.encode(self.stored_payload())
        return self.payload_json

    def fields(self) -> tuple[Any, ...]:
        """The row's values in `INPUT_FIELDS` order: the one encoding the parameters, the
        document and the COPY line are built from."""
        return (
            self.id,
            self.job_type.name,
            self.stored_json(),
            self.dedupe_key,
            self.revision,
            self.source_key,
            self.concurrency_class,
            self.priority,
            self.max_attempts,
            self.delay_s,
            self.parent_id,
            str(self.job_type.role),
            self.run_at,
            self.fairness_key,
            self.traceparent,
            self.workflow_id,
        )


def parameters(row: EnqueueRow) -> dict[str, Any]:
    """One row as enqueue_one.sql's parameters."""
    return dict(zip(NAMES, row.fields(), strict=True))


def document(rows: list[EnqueueRow]) -> str:
    """One JSON document for all rows (read by jsonb_populate_recordset): far cheaper to send
    than parallel arrays, which psycopg inspects element by element. Each row's payload goes
    in as the JSON text the size limit measured, not encoded again."""
    objects = []
    for row in rows:
        values = dict(zip(NAMES, row.fields(), strict=True))
        payload = values.pop("payload")
        objects.append(f'{_DOCUMENT.encode(values)[:-1]},"payload":{payload}}}')
    return f"[{','.join(objects)}]"


def _compile_copy_line() -> Callable[[EnqueueRow], str]:
    """`copy_line`, compiled from `INPUT_FIELDS` (as dataclasses compile `__init__`): one
    f-string over the unpacked fields, which costs a bulk enqueue a tenth less Python time
    than a loop over the fields. The source is built from the declaration alone."""
    values = [f"v{i}" for i in range(len(INPUT_FIELDS))]
    cells = [
        "{" + (value if field.plain else f"_copy_text({value})") + "}"
        for value, field in zip(values, INPUT_FIELDS, strict=True)
        if field.copied
    ]
    line = "\\t".join(cells) + "\\n"
    source = f"def copy_line(row):\n    {', '.join(values)}, = row.fields()\n    return f'{line}'\n"
    namespace: dict[str, Any] = {"_copy_text": _copy_text}
    exec(source, namespace)  # the text comes from the constants above, never from input
    compiled: Callable[[EnqueueRow], str] = namespace["copy_line"]
    compiled.__module__ = __name__
    compiled.__doc__ = (
        "One row of enqueue_copy.sql in COPY text format (`\\N` is NULL): the `copied` "
        "fields of `INPUT_FIELDS`, in their order."
    )
    return compiled


def _copy_text(value: object) -> str:
    if value is None:
        return "\\N"
    text = str(value)
    # Most values need no escape; testing for one is far cheaper than str.translate.
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_ESCAPES)
    return text


copy_line = _compile_copy_line()
