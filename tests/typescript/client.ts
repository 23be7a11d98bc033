// A small jobrelay client written from the docs (tutorial, HTTP reference) on types that
// openapi-typescript generates from docs/reference/openapi.json. `tsc --strict` must accept
// it: bodies omit every field that has a server default, method names are the operation
// ids, ids in paths are `<kind>Id`. tests/acceptance/test_typescript_client.py runs the
// check (npm ci, openapi-typescript, tsc).
import createClient from "openapi-fetch";

import type { components, operations, paths } from "./generated/jobrelay";

type Schemas = components["schemas"];

export function jobrelay(baseUrl: string, token: string) {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
}

// The operation ids read as names: a generator's method names.
export type CreateBatch = operations["createBatch"];
export type GetBatch = operations["getBatch"];
export type ListBatchItems = operations["listBatchItems"];
export type ListCode2wf = operations["listCode2wf"];
export type MaterializeCode2wf = operations["materializeCode2wf"];
export type EnqueueJob = operations["enqueueJob"];
export type GetJob = operations["getJob"];

export async function importPages(api: ReturnType<typeof jobrelay>, projectId: number) {
  // A Page Import item is `{url}` or `{html}`: the other field may be left out.
  const { data, error } = await api.POST("/v1/projects/{projectId}/batches", {
    params: { path: { projectId } },
    body: {
      type: "page_import",
      items: [{ url: "https://example.com/" }, { html: "<p>inline</p>" }],
    },
    headers: { "Idempotency-Key": "import-2026-12-04" },
  });
  if (error) throw new Error(`${error.title}: ${error.errors?.map((e) => e.path).join(", ")}`);
  const batch: Schemas["Batch"] = data;
  return batch.id;
}

export async function turnCodeIntoDesigns(api: ReturnType<typeof jobrelay>, projectId: number) {
  // `css` has a server default: an item without it compiles.
  const { data } = await api.POST("/v1/projects/{projectId}/batches", {
    params: { path: { projectId } },
    body: { type: "code2des", items: [{ html: "<p>x</p>" }] },
  });
  return data?.id;
}

export async function follow(api: ReturnType<typeof jobrelay>, batchId: string) {
  const { data: batch } = await api.GET("/v1/batches/{batchId}", {
    params: { path: { batchId } },
  });
  const { data: page } = await api.GET("/v1/batches/{batchId}/items", {
    params: { path: { batchId }, query: {} },
  });
  const states: string[] = (page?.items ?? []).map((item) => item.state);
  const counts: Schemas["Counts"] | undefined = batch?.counts;
  return { status: batch?.status, counts, states };
}

export async function generateWireframe(
  api: ReturnType<typeof jobrelay>,
  projectId: number,
  pageImportId: string,
) {
  // `placementTarget` is optional.
  const { data: created } = await api.POST("/v1/projects/{projectId}/code2wf", {
    params: { path: { projectId } },
    body: { pageImportId, figmaFileKey: "FILE", screenId: "home" },
  });
  if (!created) return undefined;
  // A resource's own id is `id`; `code2wfId` is the same value under seed 004's name.
  const code2wfId: string = created.id;
  const same: boolean = created.code2wfId === code2wfId;
  const { data: listed } = await api.GET("/v1/projects/{projectId}/code2wf", {
    params: { path: { projectId }, query: { figmaFileKey: "FILE", status: "1" } },
  });
  await api.POST("/v1/code2wf/{code2wfId}/materialize", { params: { path: { code2wfId } } });
  const { data: one } = await api.GET("/v1/code2wf/{code2wfId}", {
    params: { path: { code2wfId } },
  });
  return { same, listed: listed?.items.length, status: one?.status };
}

export async function runAJob(api: ReturnType<typeof jobrelay>) {
  // Only `type` and `payload`: priority, delay, attempts default on the server.
  const { data: enqueued } = await api.POST("/v1/jobs", {
    body: { type: "diag.sleep", payload: { seconds: 0.1 } },
  });
  if (!enqueued) return undefined;
  const { data: job } = await api.GET("/v1/jobs/{jobId}", {
    params: { path: { jobId: enqueued.id } },
  });
  const { data: child } = await api.GET("/v1/page-imports/{pageImportId}", {
    params: { path: { pageImportId: "01a2" } },
  });
  return { status: job?.status, childStatus: child?.status };
}
