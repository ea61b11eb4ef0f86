// Drives `rewind serve` with the official `openai` npm client: models, chat and completions
// (whole and streamed, which must agree under greedy sampling), usage with include_usage,
// n: 3 (indexed choices, whole and streamed), presence / frequency penalties, a logit_bias that
// forces a token,
// tool definitions and a tool-call round trip in the history, and the SDK's typed errors for
// 400 and 401. Run by tests/integration/server_test.cpp (OpenAiNodeClient) with
// OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 and OPENAI_API_KEY set; prints "ok: all N checks".
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check, finish, makeClient } from './harness.mjs';

const client = makeClient();
const baseURL = process.env.OPENAI_BASE_URL;
const apiKey = process.env.OPENAI_API_KEY;


const models = await client.models.list();
const model = models.data[0].id;

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Say hello to the lighthouse keeper.' },
];

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

await check('models.list', async () => {
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
});

await check('models.retrieve', async () => {
  const one = await client.models.retrieve(models.data[0].id);
  assert.equal(one.id, models.data[0].id);
  assert.equal(one.object, 'model');
  // Requests may name any model on a server without --alias, but a lookup knows only the
  // listed id, as OpenAI's retrieve does.
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
});

let whole;
await check('chat.completions.create', async () => {
  whole = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices.length, 1);
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(typeof whole.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
});

await check('chat.completions.create stream', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(usage, 'no usage chunk');
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  // The conversation was cached by the first request.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, 'cached_tokens');
});

await check('chat.completions.stream helper', async () => {
  const runner = client.chat.completions.stream({ model, messages, max_tokens: 12, temperature: 0 });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
});

await check('completions.create', async () => {
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logprobs: 2,
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens);
  const s = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stream: true,
  });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

await check('tools: definitions and a tool-call round trip', async () => {
  const history = [
    { role: 'user', content: 'What is the weather in Paris?' },
    {
      role: 'assistant', content: null,
      tool_calls: [{ id: 'call_1', type: 'function',
                     function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ];
  const r = await client.chat.completions.create({
    model, messages: history, tools: [weatherTool], tool_choice: 'auto', max_tokens: 8, temperature: 0,
  });
  const c = r.choices[0];
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
  if (c.finish_reason === 'tool_calls') {
    assert.ok(c.message.tool_calls.length > 0);
    for (const t of c.message.tool_calls) JSON.parse(t.function.arguments);
  }
  const s = await client.chat.completions.create({
    model, messages: history, tools: [weatherTool], max_tokens: 8, temperature: 0, stream: true,
  });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? '';
  if (c.finish_reason !== 'tool_calls') assert.equal(text, c.message.content);
});

await check('n: 3 choices, whole and streamed', async () => {
  const req = { model, messages, max_tokens: 8, temperature: 1, seed: 5, n: 3, ignore_eos: true };
  const r = await client.chat.completions.create(req);
  assert.equal(r.choices.length, 3);
  r.choices.forEach((c, i) => assert.equal(c.index, i));
  assert.equal(r.usage.completion_tokens, 24);
  const texts = r.choices.map((c) => c.message.content);
  assert.ok(new Set(texts).size >= 2, 'the choices should differ with temperature');
  // Choice i is the single request with seed + i.
  const single = await client.chat.completions.create({ ...req, n: 1, seed: 6 });
  assert.equal(single.choices[0].message.content, texts[1]);
  const s = await client.chat.completions.create({
    ...req, stream: true, stream_options: { include_usage: true },
  });
  const got = ['', '', ''];
  const finishes = [null, null, null];
  let usage = null;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) got[c.index] += c.delta.content;
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(got, texts);
  assert.deepEqual(finishes, ['length', 'length', 'length']);
  assert.equal(usage.completion_tokens, 24);
});

await check('presence and frequency penalties change a greedy reply', async () => {
  const req = { model, prompt: 'the sea the sea the sea', max_tokens: 16, temperature: 0, ignore_eos: true };
  const plain = await client.completions.create(req);
  const pen = await client.completions.create({ ...req, presence_penalty: 2, frequency_penalty: 2 });
  assert.notEqual(pen.choices[0].text, plain.choices[0].text);
  const again = await client.completions.create({ ...req, presence_penalty: 2, frequency_penalty: 2 });
  assert.equal(again.choices[0].text, pen.choices[0].text);
  await assert.rejects(
    client.completions.create({ ...req, presence_penalty: 2.5 }),
    (e) => e instanceof OpenAI.BadRequestError && /presence_penalty/.test(e.message),
  );
});

await check('logit_bias +100 forces a token', async () => {
  // The server's own /tokenize (llama.cpp's endpoint, beside /v1).
  const root = baseURL.replace(/\/v1\/?$/, '');
  const post = async (path, body) => {
    const res = await fetch(root + path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(body),
    });
    assert.equal(res.status, 200);
    return res.json();
  };
  const { tokens } = await post('/tokenize', { content: ' lighthouse' });
  const id = tokens[tokens.length - 1];
  const r = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 3, temperature: 0.7, seed: 1,
    logit_bias: { [id]: 100 },
  });
  const { content } = await post('/detokenize', { tokens: [id, id, id] });
  assert.equal(r.choices[0].text, content);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 1, logit_bias: { 99999999: 1 } }),
    (e) => e instanceof OpenAI.BadRequestError && /logit_bias/.test(e.message),
  );
});

await check('400 is a BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /image_url/.test(e.message),
  );
});

await check('401 is an AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

finish();
