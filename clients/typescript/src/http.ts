import { RegistryRequestError, RegistryUnavailableError } from './errors.js';

/** A registry answer: the status, the ETag and the parsed JSON body (undefined when empty). */
export interface RegistryResponse {
  readonly status: number;
  readonly etag: string | null;
  readonly body: unknown;
}

/** One registry call. */
export interface RegistryRequest {
  readonly method?: 'GET' | 'POST';
  readonly headers?: Record<string, string>;
  readonly body?: unknown;
  readonly timeoutMs: number;
  /** Aborts the call (e.g. on close). */
  readonly signal?: AbortSignal;
}

/**
 * Calls the registry with a timeout. Answers 2xx and 304; throws
 * {@link RegistryUnavailableError} for network errors, timeouts, 5xx and 429, and
 * {@link RegistryRequestError} for any other status.
 */
export async function callRegistry(
  fetchImpl: typeof fetch,
  url: string,
  request: RegistryRequest,
): Promise<RegistryResponse> {
  const timeout = AbortSignal.timeout(request.timeoutMs);
  const signal = request.signal === undefined ? timeout : AbortSignal.any([timeout, request.signal]);
  const headers: Record<string, string> = { accept: 'application/json', ...request.headers };
  let payload: string | undefined;
  if (request.body !== undefined) {
    payload = JSON.stringify(request.body);
    headers['content-type'] = 'application/json';
  }
  let status: number;
  let etag: string | null;
  let text: string;
  try {
    const init: RequestInit = { method: request.method ?? 'GET', headers, signal };
    if (payload !== undefined) init.body = payload;
    const response = await fetchImpl(url, init);
    status = response.status;
    etag = response.headers.get('etag');
    text = await response.text();
  } catch (cause) {
    const what = timeout.aborted ? `timed out after ${request.timeoutMs} ms` : describe(cause);
    throw new RegistryUnavailableError(`cardgate ${request.method ?? 'GET'} ${path(url)}: ${what}`, {
      cause,
    });
  }
  let body: unknown;
  if (text.length > 0) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  if ((status >= 200 && status < 300) || status === 304) {
    return { status, etag, body };
  }
  const { code, message } = errorOf(body);
  const summary = `cardgate ${request.method ?? 'GET'} ${path(url)}: HTTP ${status}${message ? `: ${message}` : ''}`;
  if (status >= 500 || status === 429 || status === 408) {
    throw new RegistryUnavailableError(summary, { status });
  }
  throw new RegistryRequestError(summary, status, code);
}

function errorOf(body: unknown): { code: string | undefined; message: string | undefined } {
  if (typeof body === 'object' && body !== null && 'error' in body) {
    const error = body.error;
    if (typeof error === 'object' && error !== null) {
      const { code, message } = error as { code?: unknown; message?: unknown };
      return {
        code: typeof code === 'string' ? code : undefined,
        message: typeof message === 'string' ? message : undefined,
      };
    }
  }
  return { code: undefined, message: typeof body === 'string' ? body.slice(0, 200) : undefined };
}

function describe(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    const detail = inner instanceof Error ? `: ${inner.message}` : '';
    return `${cause.message}${detail}`;
  }
  return String(cause);
}

function path(url: string): string {
  try {
    const u = new URL(url);
    return u.pathname;
  } catch {
    return url;
  }
}
