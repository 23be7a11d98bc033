"""Operation ids read as names for generated clients, and stay what they are (a client's
method names are part of the API)."""

from __future__ import annotations

from tests.harness import ApiHarness

OPERATION_IDS = {
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
    ("get", "/v1/me"): "getMe",
    ("get", "/v1/projects/{projectId}"): "getProject",
    ("post", "/v1/jobs"): "enqueueJob",
    ("get", "/v1/jobs"): "listJobs",
    ("get", "/v1/jobs/{jobId}"): "getJob",
    ("get", "/v1/jobs/{jobId}/attempts"): "listJobAttempts",
    ("post", "/v1/jobs/{jobId}/cancel"): "cancelJob",
    ("post", "/v1/jobs/{jobId}/retry"): "retryJob",
    ("get", "/v1/jobs/{jobId}/diagnosis"): "diagnoseJob",
    ("post", "/v1/workflows"): "createWorkflow",
    ("get", "/v1/workflows"): "listWorkflows",
    ("get", "/v1/workflows/{workflowId}"): "getWorkflow",
    ("post", "/v1/workflows/{workflowId}/cancel"): "cancelWorkflow",
    ("post", "/v1/workflows/{workflowId}/retry"): "retryWorkflow",
    ("get", "/v1/media/status"): "getMediaStatus",
    ("get", "/v1/schedules"): "listSchedules",
    ("post", "/v1/projects/{projectId}/batches"): "createBatch",
    ("get", "/v1/batches/{batchId}"): "getBatch",
    ("delete", "/v1/batches/{batchId}"): "deleteBatch",
    ("get", "/v1/batches/{batchId}/items"): "listBatchItems",
    ("post", "/v1/batches/{batchId}/cancel"): "cancelBatch",
    ("get", "/v1/page-imports/{pageImportId}"): "getPageImport",
    ("get", "/v1/code2des/{code2desId}"): "getCode2des",
    ("post", "/v1/webhooks/worker"): "receiveWorkerWebhook",
    ("post", "/v1/projects/{projectId}/code2wf"): "createCode2wf",
    ("get", "/v1/projects/{projectId}/code2wf"): "listCode2wf",
    ("get", "/v1/code2wf/{code2wfId}"): "getCode2wf",
    ("delete", "/v1/code2wf/{code2wfId}"): "deleteCode2wf",
    ("get", "/v1/code2wf/{code2wfId}/result"): "getCode2wfResult",
    ("post", "/v1/code2wf/{code2wfId}/materialize"): "materializeCode2wf",
    ("get", "/v1/console/overview"): "getConsoleOverview",
    ("get", "/v1/console/health"): "getConsoleHealth",
    ("get", "/metrics"): "getMetrics",
    ("get", "/dev/local-issuer/jwks.json"): "getLocalJwks",
}


async def test_every_operation_id_is_a_stable_readable_name(api: ApiHarness) -> None:
    document = (await api.client.get("/openapi.json")).json()
    found = {
        (method, path): operation["operationId"]
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert found == OPERATION_IDS
    assert len(set(found.values())) == len(found)  # unique
