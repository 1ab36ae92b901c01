// The conversation page's replyd client: pairing, inference (streamed when
// the server streams, plain JSON otherwise), feedback and the health check.
// The tablet's API key lives in localStorage and is never shown.

const KEY = 'replyd.app.key';
const CLIENT = 'replyd.app.client_id';

/** How long the page waits for an inference before giving up. replyd's own
 * deadline is 30 s by default; the rest covers the upload on a slow LAN. */
export const INFER_TIMEOUT_MS = 45000;

/** An error answer from replyd (or no answer). status 0: not reachable. */
export class ReplydError extends Error {
  constructor(status, code, message, retryAfter = 0) {
    super(message);
    this.name = 'ReplydError';
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

export const pairing = {
  key: () => localStorage.getItem(KEY),
  clientId: () => localStorage.getItem(CLIENT) || '',
  forget() {
    localStorage.removeItem(KEY);
    localStorage.removeItem(CLIENT);
  },
};

/** DELETE /v1/pair: the tablet gives its key up (replyd revokes it).
 * Resolves true when the key no longer works (revoked now or before),
 * false when replyd could not be asked. */
export async function unpairKey(timeoutMs = 5000) {
  const key = pairing.key();
  if (!key) return true;
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetch('/v1/pair', { method: 'DELETE', headers: { 'X-API-KEY': key }, credentials: 'omit', cache: 'no-store', signal: ctl.signal });
    return res.ok || res.status === 401;
  } catch {
    return false;
  } finally {
    clearTimeout(t);
  }
}

/** A short random id (hex) for dialog_id and X-Request-ID; works without a
 * secure context, unlike crypto.randomUUID. */
export function randomId(bytes = 12) {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

async function errorFrom(res) {
  let data = null;
  try { data = await res.json(); } catch { /* not JSON */ }
  const retry = Number(res.headers.get('Retry-After')) || 0;
  const message = (data && data.message) || `replyd answered ${res.status}`;
  return new ReplydError(res.status, (data && data.error) || `http_${res.status}`, message, retry);
}

async function send(url, init) {
  try {
    return await fetch(url, { credentials: 'omit', cache: 'no-store', ...init });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ReplydError(0, 'network', 'replyd is not reachable.');
  }
}

/** Trades a pairing code for this tablet's key, which it keeps. */
export async function pair(code) {
  const res = await send('/v1/pair', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify({ code }),
  });
  if (!res.ok) throw await errorFrom(res);
  const data = await res.json();
  localStorage.setItem(KEY, data.api_key);
  localStorage.setItem(CLIENT, data.client_id || '');
  return { clientId: data.client_id || '' };
}

/** GET /healthz: resolves to its JSON (status ok, loading or error) or
 * rejects with a ReplydError of status 0 when replyd is not reachable. */
export async function health(timeoutMs = 5000) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetch('/healthz', { cache: 'no-store', signal: ctl.signal });
    return await res.json();
  } catch {
    throw new ReplydError(0, 'network', 'replyd is not reachable.');
  } finally {
    clearTimeout(t);
  }
}

/**
 * Runs one inference. payload: the InferPayload; audio: {blob, filename} or
 * null; signal: aborts it (the partner spoke again, or Cancel); onTranscript
 * is called as soon as a streaming server sends the transcript, and
 * onCandidate with each reply ({inference_id, rank, text, language}) as a
 * streaming server sends it, before the whole answer. Resolves to the
 * InferResponse JSON; rejects with ReplydError, or AbortError.
 */
export async function infer({ payload, audio, signal, requestId, onTranscript, onCandidate }) {
  const key = pairing.key();
  if (!key) throw new ReplydError(401, 'unpaired', 'This tablet is not paired.');
  const fd = new FormData();
  fd.append('payload', new Blob([JSON.stringify(payload)], { type: 'application/json' }), 'payload.json');
  if (audio) fd.append('audio', audio.blob, audio.filename);
  const res = await send('/v1/infer', {
    method: 'POST',
    headers: {
      'X-API-KEY': key,
      'X-Request-ID': requestId,
      // Streaming servers send the transcript first; others answer JSON.
      Accept: 'text/event-stream, application/json;q=0.9',
    },
    body: fd,
    signal,
  });
  if (!res.ok) throw await errorFrom(res);
  const type = res.headers.get('Content-Type') || '';
  if (type.startsWith('text/event-stream')) return readStream(res, onTranscript, onCandidate);
  const data = await res.json();
  if (onTranscript && typeof data.transcript === 'string') onTranscript(data.transcript, data);
  return data;
}

/** Reads a text/event-stream answer: transcript, a candidate event for each
 * reply as it is complete, then candidates (the InferResponse), or error
 * ({error, message}). */
async function readStream(res, onTranscript, onCandidate) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let result = null;
  let transcript;
  const handle = (event, data) => {
    let json = null;
    try { json = JSON.parse(data); } catch { json = data; }
    if (event === 'transcript') {
      transcript = json && typeof json === 'object' ? json.transcript : json;
      if (onTranscript) onTranscript(transcript ?? '', json);
    } else if (event === 'candidate') {
      if (onCandidate && json && typeof json === 'object') onCandidate(json);
    } else if (event === 'candidates') {
      result = json;
    } else if (event === 'error') {
      throw new ReplydError(500, (json && json.error) || 'internal', (json && json.message) || 'replyd failed while answering.');
    }
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += value;
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      let event = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) handle(event, data.join('\n'));
    }
    if (done) break;
  }
  if (!result) throw new ReplydError(500, 'internal', 'replyd ended the answer without candidates.');
  if (transcript !== undefined && result.transcript === undefined) result.transcript = transcript;
  return result;
}

/**
 * Reports what the user did with an answer (POST /v1/feedback): chosen_rank,
 * spoken_text, none_fit, time_to_choice_ms. It never throws: the page works
 * the same on a replyd without the endpoint (404) or without inference ids.
 */
export async function feedback(body) {
  const key = pairing.key();
  if (!key || !body.inference_id) return false;
  try {
    const res = await fetch('/v1/feedback', {
      method: 'POST',
      credentials: 'omit',
      headers: { 'X-API-KEY': key, 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(body),
      keepalive: true,
    });
    return res.ok;
  } catch {
    return false;
  }
}
