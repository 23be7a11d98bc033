"""The OpenAPI document as the API really answers: every error is problem+json, the body
of `POST /v1/jobs` is a union of the registry's job types, and the body of a batch creation
a union of the batch types with their item models.

FastAPI documents its own 422 body (`HTTPValidationError`) and no 401; jobrelay answers
every error with RFC 9457 problem details. The jobs route validates payloads through the
registry at run time (so errors keep jobrelay's field paths), which FastAPI sees as a plain
object; the document shows each job type's request instead, discriminated by `type`. This
rewrites the generated document once so clients and schemathesis see the truth.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from jobrelay.api.problems import PROBLEM_JSON
from jobrelay.batches.creation import ITEM_MODELS
from jobrelay.jobs.registry import Registry


class FieldProblem(BaseModel):
    path: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldProblem] | None = None


_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_DESCRIPTIONS = {
    "401": "Missing or invalid bearer token",
    "403": "The caller lacks the required role",
    "413": "Request body too large",
    "422": "Invalid request (field paths in `errors`)",
}


# Operation ids are the names generated clients give their methods (`createBatch`,
# `getBatch`): the route function's name in camelCase, or the name below where the function's
# own does not say what the operation does. Part of the API: a test pins every one, so a
# renamed Python function never renames a client's method.
_OPERATION_NAMES = {
    "healthz": "getHealth",
    "readyz": "getReadiness",
    "me": "getMe",
    "job_attempts": "listJobAttempts",
    "media_status": "getMediaStatus",
    "list_items": "listBatchItems",
    "worker_outcome": "receiveWorkerWebhook",
    "discover_code2wf": "listCode2wf",
    "console_overview": "getConsoleOverview",
    "console_health": "getConsoleHealth",
    "local_jwks": "getLocalJwks",
}


def operation_id(route: APIRoute) -> str:
    """The operation id of `route` (FastAPI's `generate_unique_id_function`)."""
    named = _OPERATION_NAMES.get(route.name)
    if named is not None:
        return named
    first, *rest = route.name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def install_openapi(app: FastAPI, registry: Registry) -> None:
    """Replace `app.openapi` with a cached generator that documents problem responses and
    the job types of `registry`."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _document_problems(schema)
            _document_job_types(schema, registry)
            _document_batch_items(schema)
            _readable_titles(schema)
            _optional_request_defaults(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_problems(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    components["FieldProblem"] = (
        components["Problem"].pop("$defs", {}).get("FieldProblem", FieldProblem.model_json_schema())
    )
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            if operation.get("security"):
                responses.setdefault("401", {})
            if operation.get("requestBody"):
                responses.setdefault("413", {})
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400:
                    description = _DESCRIPTIONS.get(status) or response.get("description")
                    response["description"] = description or "Error"
                    response["content"] = {PROBLEM_JSON: {"schema": _PROBLEM_REF}}


_REF = "#/components/schemas/{model}"
JOBS_PATH = "/v1/jobs"


def _document_job_types(schema: dict[str, Any], registry: Registry) -> None:
    """`POST /v1/jobs` takes one of `JobRequest.<type>`: `type` fixed, `payload` the type's
    model (without its discriminator), and the common options of `JobIn`."""
    operation = schema.get("paths", {}).get(JOBS_PATH, {}).get("post")
    if operation is None:
        return
    components = schema["components"]["schemas"]
    common = components.get("JobIn", {}).get("properties", {})
    options = {name: spec for name, spec in common.items() if name not in ("type", "payload")}
    mapping: dict[str, str] = {}
    for job_type in sorted(registry, key=lambda t: t.name):
        payload = job_type.payload_model.model_json_schema(by_alias=True, ref_template=_REF)
        components.update(payload.pop("$defs", {}))
        payload.get("properties", {}).pop("type", None)
        if "type" in payload.get("required", []):
            payload["required"].remove("type")
        payload["title"] = f"{job_type.name} payload"
        name = f"JobRequest.{job_type.name}"
        components[name] = {
            "title": name,
            "type": "object",
            "properties": {"type": {"const": job_type.name}, "payload": payload, **options},
            "required": ["type", "payload"],
            "additionalProperties": False,
        }
        mapping[job_type.name] = f"#/components/schemas/{name}"
    body = {
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "type", "mapping": mapping},
    }
    operation["requestBody"]["content"]["application/json"]["schema"] = body


BATCHES_PATH = "/v1/projects/{projectId}/batches"


def _document_batch_items(schema: dict[str, Any]) -> None:
    """A batch creation takes one of `CreateBatch.<type>`: `type` fixed and `items` that
    type's item model (`BatchItem.<type>`), instead of the loose `CreateBatch`. The route
    still validates items itself, so a bad item keeps its `items.<position>.<field>` path
    and every failing position is reported at once."""
    operation = schema.get("paths", {}).get(BATCHES_PATH, {}).get("post")
    if operation is None:
        return
    components = schema["components"]["schemas"]
    loose = components.pop("CreateBatch")
    mapping: dict[str, str] = {}
    for batch_type, model in ITEM_MODELS.items():
        item = model.model_json_schema(by_alias=True, ref_template=_REF)
        components.update(item.pop("$defs", {}))
        item_name = f"BatchItem.{batch_type}"
        components[item_name] = {**item, "title": item_name}
        name = f"CreateBatch.{batch_type}"
        items = {**loose["properties"]["items"], "items": {"$ref": _REF.format(model=item_name)}}
        components[name] = {
            "title": name,
            "description": loose.get("description", ""),
            "type": "object",
            "properties": {"type": {"const": batch_type}, "items": items},
            "required": ["type", "items"],
            "additionalProperties": False,
        }
        mapping[batch_type] = _REF.format(model=name)
    operation["requestBody"]["content"]["application/json"]["schema"] = {
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "type", "mapping": mapping},
    }


def _readable_titles(schema: dict[str, Any]) -> None:
    """Property titles as words (`pageImportId` -> "Page import id"), where pydantic made one
    from the camelCase alias ("Pageimportid"); a title a model sets itself is kept."""

    def visit(node: object) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
        if not isinstance(node, dict):
            return
        properties = node.get("properties")
        if isinstance(properties, dict):
            for name, spec in properties.items():
                retitle(spec, name)
        if isinstance(node.get("name"), str) and "in" in node:  # a parameter
            retitle(node.get("schema"), node["name"].removesuffix("[]"))
        if isinstance(node.get("operationId"), str):  # FastAPI's "Response Getlocaljwks"
            for response in node.get("responses", {}).values():
                for content in response.get("content", {}).values():
                    retitle(content.get("schema"), node["operationId"], suffix=" response")
        for value in node.values():
            visit(value)

    def retitle(spec: object, name: str, suffix: str = "") -> None:
        if not isinstance(spec, dict):
            return
        if spec.get("title") in {f"{t}{suffix}" for t in _generated_titles(name)} | {
            f"Response {name.title()}"
        }:
            spec["title"] = _words(name) + suffix

    visit(schema.get("components", {}))
    visit(schema.get("paths", {}))


def _generated_titles(name: str) -> set[str]:
    """The titles pydantic gives a property `name`: from the alias, or the field's name."""
    titles = {name.title(), name.replace("_", " ").title(), _snake(name).replace("_", " ")}
    return titles | {title.title() for title in titles} | {f"{name.title()}[]"}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _words(name: str) -> str:
    return _snake(name).replace("_", " ").capitalize()


def _optional_request_defaults(schema: dict[str, Any]) -> None:
    """A request field with a server default is optional, also for generated clients.

    openapi-typescript (7, `defaultNonNullable`) types every property that carries a
    `default` as always present, so a Code2Des item `{"html": ...}` without `css` would not
    compile. In the schemas that request bodies use, a default of a property the body may
    omit moves into its description ("Default: null."); response schemas keep theirs (a
    response always has the field)."""
    components = schema.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            name = ref.removeprefix(_REF_PREFIX)
            if name not in seen and name in components:
                seen.add(name)
                visit(components[name])
        listed = node.get("required")  # a request body's own `required` is a bool
        required = set(listed) if isinstance(listed, list) else set()
        for name, spec in (node.get("properties") or {}).items():
            if isinstance(spec, dict) and name not in required and "default" in spec:
                default = json.dumps(spec.pop("default"))
                described = spec.get("description", "").rstrip()
                spec["description"] = f"{described} Default: {default}.".lstrip()
        for key, value in node.items():
            if key != "$ref":
                visit(value)

    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if body:
                visit(body)


_REF_PREFIX = "#/components/schemas/"
