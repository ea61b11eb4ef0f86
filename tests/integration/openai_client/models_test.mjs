// Drives a `rewind serve` of several models with the official `openai` npm client: the listed
// ids, a greedy chat reply per model (whole and streamed, which must agree; the answer names the
// model asked for) and the SDK's NotFoundError for a model the server does not serve. Run by
// tests/integration/server_test.cpp (SeveralModels.OpenAiNodeClient) with OPENAI_BASE_URL,
// OPENAI_API_KEY and REWIND_MODELS (the ids /v1/models must list, comma-separated) set; prints
// each model's reply as `replies: {"id": text, ...}` for the test to compare with single-model
// servers, then "ok: all N checks".
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check, finish, makeClient } from './harness.mjs';

const client = makeClient();
const expected = (process.env.REWIND_MODELS || '').split(',');


const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Which model are you?' },
];

let ids = [];
await check('models.list', async () => {
  const list = await client.models.list();
  ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, expected);
});

await check('models.retrieve', async () => {
  for (const id of ids) assert.equal((await client.models.retrieve(id)).id, id);
  await assert.rejects(client.models.retrieve('no-such-model'),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

const replies = {};
for (const model of ids) {
  await check(`chat with ${model}, whole and streamed`, async () => {
    const whole = await client.chat.completions.create({
      model, messages, max_tokens: 10, temperature: 0,
    });
    assert.equal(whole.model, model);
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 10, temperature: 0, stream: true,
    });
    let text = '';
    for await (const chunk of stream) {
      assert.equal(chunk.model, model);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(text, whole.choices[0].message.content);
    replies[model] = text;
  });
}

await check('an unknown model is NotFoundError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4', messages, max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found',
  );
});

console.log(`replies: ${JSON.stringify(replies)}`);
finish();
