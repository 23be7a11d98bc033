"""The worker wire contract validates strictly and names the bad field."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from jobrelay.protocol import (
    Code2WfMessage,
    PageImportMessage,
    PageImportRequest,
    WorkerOutcome,
    parse_message,
)


def test_messages_round_trip_through_json() -> None:
    message = PageImportMessage(
        page_import_id="p1",
        batch_id="b1",
        organization_id=1,
        project_id=2,
        request=PageImportRequest(url="http://127.0.0.1:8080/a.html"),
    )
    assert parse_message(message.model_dump_json()) == message
    wf = Code2WfMessage(
        code2wf_id="c1",
        page_import_id="p1",
        figma_file_key="F",
        screen_id="s",
        organization_id=1,
        project_id=2,
        page_import_result_url="page_import/p1/1/manifest.json",
    )
    body = json.loads(wf.model_dump_json())
    assert body["code2wf_id"] == "c1" and body["attempt"] == 1 and body["kind"] == "code2wf"


@pytest.mark.parametrize(
    "request_body", [{}, {"url": "http://x/a", "html": "<p>"}, {"url": "ftp://x"}]
)
def test_page_import_request_needs_exactly_one_valid_source(request_body: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        PageImportRequest.model_validate(request_body)


def test_unknown_kind_is_rejected_with_its_path() -> None:
    with pytest.raises(ValidationError) as info:
        parse_message('{"kind": "video", "organization_id": 1, "project_id": 1}')
    assert "kind" in str(info.value)


def test_outcomes_use_camel_case_and_check_their_fields() -> None:
    ok = WorkerOutcome.model_validate(
        {
            "kind": "page_import",
            "id": "p1",
            "outcome": "completed",
            "resultUrl": "page_import/p1/1/manifest.json",
            "manifestHash": "a" * 64,
        }
    )
    assert ok.result_url == "page_import/p1/1/manifest.json"
    for bad in [
        {"kind": "page_import", "id": "p1", "outcome": "completed", "resultUrl": "k"},
        {"kind": "code2des", "id": "c", "outcome": "failed"},
        {"kind": "code2wf", "id": "c", "outcome": "completed", "resultUrl": "k", "flagCount": 0},
        {"kind": "code2des", "id": "c", "outcome": "done", "resultUrl": "k"},
    ]:
        with pytest.raises(ValidationError):
            WorkerOutcome.model_validate(bad)
