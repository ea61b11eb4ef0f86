// Tool calls end to end with the official `openai` npm client against `rewind serve` on the
// trained built-in model (models/kjv-target), which answers a verse lookup with a call of the
// offered `lookup_verse` tool: whole and streamed (tool-call deltas assembled the client's
// way), then the tool result sent back in the history. Run by
// tests/integration/server_test.cpp (ServerTools) with OPENAI_BASE_URL and OPENAI_API_KEY set;
// prints "ok: all N checks".
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check, finish, makeClient } from './harness.mjs';

const client = makeClient();


const model = (await client.models.list()).data[0].id;
const lookup = {
  type: 'function',
  function: {
    name: 'lookup_verse',
    description: 'Look up one verse of the King James Bible by its reference.',
    parameters: {
      type: 'object',
      properties: {
        book: { type: 'string', description: 'Book name, e.g. Genesis' },
        chapter: { type: 'integer', description: 'Chapter number' },
        verse: { type: 'integer', description: 'Verse number' },
      },
      required: ['book', 'chapter', 'verse'],
    },
  },
};
const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Look up John 3:16.' },
];

function checkArgs(call) {
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'lookup_verse');
  assert.ok(call.id);
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.book, 'string');
  assert.ok(Number.isInteger(args.chapter));
  assert.ok(Number.isInteger(args.verse));
}

let whole;
await check('tool call, whole', async () => {
  whole = await client.chat.completions.create({
    model, messages, tools: [lookup], max_tokens: 80, temperature: 0,
  });
  const c = whole.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls.length, 1);
  checkArgs(c.message.tool_calls[0]);
});

await check('tool call, streamed', async () => {
  const stream = await client.chat.completions.create({
    model, messages, tools: [lookup], max_tokens: 80, temperature: 0, stream: true,
  });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    for (const d of ch.delta.tool_calls ?? []) {
      const at = d.index ?? 0;
      calls[at] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) calls[at].id = d.id;
      if (d.function?.name) calls[at].function.name += d.function.name;
      if (d.function?.arguments) calls[at].function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  checkArgs(calls[0]);
  assert.deepEqual(JSON.parse(calls[0].function.arguments),
                   JSON.parse(whole.choices[0].message.tool_calls[0].function.arguments));
});

await check('tool result in the history', async () => {
  const call = whole.choices[0].message.tool_calls[0];
  const r = await client.chat.completions.create({
    model,
    messages: [
      ...messages,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id,
        content: 'For God so loved the world, that he gave his only begotten Son.' },
    ],
    tools: [lookup],
    max_tokens: 24,
    temperature: 0,
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
});

finish();
