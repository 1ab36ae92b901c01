// The admin API client: adds the admin credential, parses JSON, turns
// {error, message} bodies into ApiError and sends any 401 to the login view.

const SESSION = 'replyd.session';
const ADMIN_KEY = 'replyd.admin_key';

/** The admin credential, kept in sessionStorage (one tab, no cookies). */
export const auth = {
  /** The header to send, or null when signed out. */
  header() {
    const token = sessionStorage.getItem(SESSION);
    if (token) return ['X-ADMIN-SESSION', token];
    const key = sessionStorage.getItem(ADMIN_KEY);
    if (key) return ['X-ADMIN-KEY', key];
    return null;
  },
  setSession(token) {
    sessionStorage.removeItem(ADMIN_KEY);
    sessionStorage.setItem(SESSION, token);
  },
  setAdminKey(key) {
    sessionStorage.removeItem(SESSION);
    sessionStorage.setItem(ADMIN_KEY, key);
  },
  isSession: () => sessionStorage.getItem(SESSION) !== null,
  clear() {
    sessionStorage.removeItem(SESSION);
    sessionStorage.removeItem(ADMIN_KEY);
  },
};

/** An error answer from replyd, carrying its status, code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

let unauthorized = () => {};

/** Sets what happens when a signed-in request gets 401. */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

/**
 * Calls replyd. opts: query (object; empty values dropped), json (body),
 * form (FormData), file (a File or Blob sent as the raw body), signal, credential ([header, value] to use instead of the
 * stored one; a 401 then does not sign out), anonymous (send no credential),
 * raw (resolve to the Response itself, unread, for a download).
 * Resolves to the parsed JSON body (null when empty); rejects with ApiError.
 */
export async function api(method, path, opts = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(opts.query || {})) {
    if (v !== '' && v != null) url.searchParams.set(k, String(v));
  }
  const headers = { Accept: 'application/json' };
  let body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  } else if (opts.form) {
    body = opts.form;
  } else if (opts.file) {
    headers['Content-Type'] = 'application/octet-stream';
    body = opts.file;
  }
  const cred = opts.anonymous ? null : opts.credential || auth.header();
  if (cred) headers[cred[0]] = cred[1];

  let res;
  try {
    res = await fetch(url, { method, headers, body, signal: opts.signal, credentials: 'omit', cache: 'no-store' });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, 'network', 'replyd cannot be reached. Is it running?');
  }
  if (opts.raw && res.ok) return res;
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!res.ok) {
    const message = (data && data.message) || `replyd answered ${res.status} ${res.statusText}`.trim();
    const err = new ApiError(res.status, (data && data.error) || `http_${res.status}`, message);
    if (res.status === 429) err.retryAfter = Number(res.headers.get('Retry-After')) || 0;
    if (res.status === 401 && cred && !opts.credential) unauthorized(err);
    throw err;
  }
  return data;
}
