// Structured output with the official `openai` npm client against `rewind serve`: a zod schema
// through zodResponseFormat and chat.completions.parse (the reply must parse and satisfy the
// schema; zod's integers carry the safe-integer minimum and maximum), the same streamed, a
// forced call of a zodFunction tool whose parsed arguments satisfy its schema, a zod regex
// (JSON Schema's pattern) that the reply's string matches, and a pattern outside the supported
// subset (a lookahead) as a BadRequestError naming it. Run by
// tests/integration/server_test.cpp (StructuredOutputNodeClient) with OPENAI_BASE_URL and
// OPENAI_API_KEY set; prints "ok: all N checks".
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check, finish, makeClient } from './harness.mjs';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const client = makeClient();


const model = (await client.models.list()).data[0].id;
const messages = [
  { role: 'system', content: 'You answer in JSON.' },
  { role: 'user', content: 'Describe a king of Israel.' },
];
const King = z.object({
  name: z.string().max(12),
  reign_years: z.number().int(),
  title: z.enum(['king', 'prophet', 'judge']),
  sons: z.array(z.string().max(8)).max(2),
  capital: z.object({ city: z.string().max(10), walled: z.boolean() }),
  note: z.string().max(6).nullable(),
});

let wholeContent = '';
await check('chat.completions.parse with zodResponseFormat', async () => {
  const r = await client.chat.completions.parse({
    model, messages, max_tokens: 300, temperature: 0,
    response_format: zodResponseFormat(King, 'king'),
  });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(msg.parsed, `no parsed value: ${msg.content}`);
  King.parse(msg.parsed);  // throws when the reply breaks the schema
  assert.deepEqual(msg.parsed, JSON.parse(msg.content));
  wholeContent = msg.content;
});

await check('streamed structured output equals the whole reply', async () => {
  const stream = client.chat.completions.stream({
    model, messages, max_tokens: 300, temperature: 0,
    response_format: zodResponseFormat(King, 'king'),
  });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, wholeContent);
  King.parse(final.choices[0].message.parsed);
});

await check('sampled replies satisfy the schema', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.parse({
      model, messages, max_tokens: 300, temperature: 1.0, seed,
      response_format: zodResponseFormat(King, 'king'),
    });
    if (r.choices[0].finish_reason !== 'stop') continue;  // cut by max_tokens
    King.parse(r.choices[0].message.parsed);
  }
});

const Lookup = z.object({ book: z.string().max(10), chapter: z.number().int().min(1).max(150) });
await check('a forced zodFunction call with schema-valid arguments', async () => {
  const r = await client.chat.completions.parse({
    model, messages: [{ role: 'user', content: 'Look up a verse.' }], max_tokens: 200,
    temperature: 0, tools: [zodFunction({ name: 'lookup', parameters: Lookup })],
    tool_choice: { type: 'function', function: { name: 'lookup' } },
  });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  const calls = r.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'lookup');
  Lookup.parse(calls[0].function.parsed_arguments);
});

await check('a zod regex constrains the string', async () => {
  const Code = z.object({ code: z.string().regex(/^[A-Z]{2}-\d{3}$/) });
  const r = await client.chat.completions.parse({
    model, messages, max_tokens: 100, temperature: 0,
    response_format: zodResponseFormat(Code, 'code'),
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  Code.parse(r.choices[0].message.parsed);  // throws when the code breaks the regex
});

await check('an unsupported pattern is a BadRequestError naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 10,
      response_format: zodResponseFormat(z.object({ code: z.string().regex(/^(?=A)[A-Z]+$/) }), 'c'),
    }),
    (e) => e instanceof OpenAI.BadRequestError && /lookaround .* in 'pattern'/.test(e.message),
  );
});

finish();
