// Calls to the server this page came from, with the API key when one is set (asked for on the
// first 401 and kept in this browser's localStorage).
const KEY = 'rewind.apiKey';

export class AuthError extends Error {}

export function apiKey() {
  return localStorage.getItem(KEY) || '';
}
export function setApiKey(k) {
  if (k) localStorage.setItem(KEY, k);
  else localStorage.removeItem(KEY);
}

function headers(json) {
  const hd = {};
  if (json) hd['Content-Type'] = 'application/json';
  const k = apiKey();
  if (k) hd['Authorization'] = 'Bearer ' + k;
  return hd;
}

async function failure(r) {
  let msg = r.status + ' ' + r.statusText;
  try {
    const j = await r.json();
    if (j && j.error && j.error.message) msg = j.error.message;
  } catch (_) {
    /* not JSON */
  }
  if (r.status === 401) return new AuthError(msg);
  return new Error(msg);
}

export async function getJson(path) {
  const r = await fetch(path, { headers: headers(false), cache: 'no-store' });
  if (!r.ok) throw await failure(r);
  return r.json();
}

// Streams a chat completion: yields each parsed server-sent event (chunks, then the usage
// chunk) until `data: [DONE]`. An error event throws.
export async function* streamChat(body, signal) {
  const r = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: headers(true),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!r.ok) throw await failure(r);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;  // comments (keep-alive) and other fields
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message || 'generation failed');
        yield j;
      }
    }
  }
}
