"""The OpenAPI document as the API really answers: every error is problem+json.

FastAPI documents its own 422 body (`HTTPValidationError`) and no 401; jobrelay answers
every error with RFC 9457 problem details. This rewrites the generated document once so
clients and schemathesis see the truth.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from jobrelay.api.problems import PROBLEM_JSON


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


def install_openapi(app: FastAPI) -> None:
    """Replace `app.openapi` with a cached generator that documents problem responses."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _document_problems(schema)
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
