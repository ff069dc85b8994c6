// The server's API as the page uses it: GET /v1/models and POST /v1/translate.

/** The JSON body of a response, or an {error} saying it was not JSON. */
async function readJson(response) {
  const raw = await response.text();
  try {
    return JSON.parse(raw);
  } catch {
    const line = raw.trim().split("\n")[0].slice(0, 200);
    return { error: line || `the server answered ${response.status} ${response.statusText} with no body` };
  }
}

/** The server's one-line error from a body ({"error"}, or FastAPI's {"detail"}). */
function errorMessage(body, response) {
  if (body && typeof body.error === "string") return body.error;
  if (body && body.detail !== undefined) {
    const detail = Array.isArray(body.detail) ? body.detail[0] : body.detail;
    if (typeof detail === "string") return detail;
    if (detail && detail.msg) return `${(detail.loc || []).join(".")}: ${detail.msg}`;
  }
  return `${response.status} ${response.statusText}`;
}

/** An error carrying the server's one-line message and its HTTP status. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** Every model and language pair of the server, with its defaults and limits (one
 *  answer for a server of one model or of many); ApiError when the server refuses. */
export async function fetchModels() {
  const response = await fetch("/v1/models", { headers: { Accept: "application/json" } });
  const body = await readJson(response);
  if (!response.ok) throw new ApiError(errorMessage(body, response), response.status);
  return body;
}

/** The translation of `text` along `pair` ({source, target}; null on a one-model server
 *  whose model records no languages) with `options` (beam, alpha, nbest, attention), sent
 *  with the API key `key` when there is one: the server's whole answer; ApiError when it
 *  refuses. */
export async function requestTranslation(text, pair, options, key) {
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  if (key) headers["X-API-Key"] = key;
  const route = pair ? { source: pair.source, target: pair.target } : {};
  const response = await fetch("/v1/translate", {
    method: "POST", headers, body: JSON.stringify({ text, ...route, ...options }),
  });
  const body = await readJson(response);
  if (!response.ok) throw new ApiError(errorMessage(body, response), response.status);
  return body;
}
