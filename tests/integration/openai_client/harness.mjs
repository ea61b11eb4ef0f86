// The npm client tests' shared harness: a client for OPENAI_BASE_URL / OPENAI_API_KEY (no
// retries), named checks that count passes and mark the process failed, and the closing line
// the C++ tests look for ("ok: all N checks").
import assert from 'node:assert/strict';
import OpenAI from 'openai';

export function makeClient() {
  const baseURL = process.env.OPENAI_BASE_URL;
  assert.ok(baseURL, 'OPENAI_BASE_URL is not set');
  return new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0, timeout: 60_000 });
}

let checks = 0;
export async function check(name, fn) {
  try {
    await fn();
    checks++;
    console.log(`pass: ${name}`);
  } catch (e) {
    console.error(`FAIL: ${name}: ${e && e.stack ? e.stack : e}`);
    process.exitCode = 1;
  }
}

export function finish() {
  if (process.exitCode) {
    console.error(`failed (${checks} checks passed)`);
    process.exit(process.exitCode);
  }
  console.log(`ok: all ${checks} checks`);
}
