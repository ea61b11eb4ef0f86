// The page of `rewind serve` in a real browser: headless Chromium (Debian's `chromium`) driven
// by puppeteer-core against a server on the built-in model with --api-key. It asks for the key,
// sends a message and shows the streamed reply, edits the first message and regenerates, and
// checks each reply's cached / re-run tokens and divergence against /v1/cache; opens the cache
// view and finds the branch with its checkpoints and markers; stops a reply; runs a reply full
// of markup (<script>, event-handler attributes, javascript: links) and user text of the same
// kind through the page and checks nothing ran; checks that another origin cannot call the
// API. Then, against a server of two models (the built-in kjv-target and kjv-draft), picks a
// model in the header and checks that the replies and the cache view come from the one picked,
// and that the choice survives a reload. Screenshots go to --out (build/<preset>/web_ui, kept
// as CI artifacts).
// Usage: node web_ui_test.mjs --binary PATH/rewind --out DIR [--chromium PATH]
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import puppeteer from 'puppeteer-core';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const binary = arg('--binary');
const outDir = arg('--out', join(tmpdir(), 'rewind-web-ui'));
const chromium = arg('--chromium', process.env.CHROMIUM || '/usr/bin/chromium');
const KEY = 'web-ui-test-key';
const MODELS = join(dirname(fileURLToPath(import.meta.url)), '../../../models');
mkdirSync(outDir, { recursive: true });

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log('ok: ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL: ' + name + '\n  ' + (e.stack || e));
  }
}

// ---- the server ----
function startServer(extra = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(binary, ['serve', '--port', '0', '--threads', '1', '--api-key', KEY, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const timer = setTimeout(() => reject(new Error('server did not start:\n' + log)), 60000);
    p.stderr.on('data', (d) => {
      log += d;
    });
    p.stdout.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ proc: p, url: m[1], log: () => log });
      }
    });
    p.on('exit', (code) => reject(new Error('server exited ' + code + ':\n' + log)));
  });
}

async function api(url, path, body) {
  const r = await fetch(url + path, body === undefined ? { headers: { Authorization: 'Bearer ' + KEY } } : {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 200, path);
  return r.json();
}

const server = await startServer();
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 820 });
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
page.on('dialog', (d) => d.dismiss());

const idle = () => page.waitForFunction(() => !document.body.classList.contains('generating') && document.querySelector('#send') && !document.querySelector('#send').hidden, { timeout: 60000 });
const lastAssistant = () => page.evaluate(() => {
  const all = document.querySelectorAll('article.msg.assistant');
  const m = all[all.length - 1];
  if (!m) return null;
  const st = m.querySelector('.stats');
  const err = m.querySelector('.error');
  return { text: m.querySelector('.md') ? m.querySelector('.md').textContent : '', stats: st ? { ...st.dataset } : {}, statsText: st ? st.textContent : '', error: err ? err.textContent : null };
});
async function send(text) {
  await page.click('#composer-input');
  await page.keyboard.type(text);
  await page.click('#send');
  await page.waitForFunction(() => document.body.classList.contains('generating') || document.querySelectorAll('article.msg.assistant .stats[data-id]').length > 0, { timeout: 30000 });
  await idle();
}
async function setField(sel, value) {
  await page.$eval(sel, (el, v) => {
    el.value = v;
    el.dispatchEvent(new Event('change'));
  }, value);
}
// The /v1/cache row of a reply must say what the page showed.
async function expectMatchesCache(st) {
  const c = await api(server.url, '/v1/cache');
  const row = c.recent.find((r) => r.id === st.id);
  assert.ok(row, 'no /v1/cache row for ' + st.id);
  assert.equal(String(row.resumed_at), st.cached, 'cached tokens');
  assert.equal(String(row.rerun_tokens), st.rerun, 're-run tokens');
  assert.equal(String(row.diverged_at), st.diverged, 'diverged at');
  assert.equal(String(row.resumed_at), st.resumed, 'resumed at');
  assert.equal(String(row.prompt_tokens), st.prompt, 'prompt tokens');
  return row;
}

let edited = null;
try {
  await check('the page asks for the API key and then shows the model', async () => {
    const streamed = [];
    page.on('response', (r) => {
      if (r.url().endsWith('/v1/chat/completions')) streamed.push(r.headers()['content-type']);
    });
    page.streamed = streamed;
    await page.goto(server.url + '/', { waitUntil: 'load' });
    await page.waitForSelector('#key-input', { visible: true });
    await page.type('#key-input', KEY);
    await page.click('#key-save');
    await page.waitForFunction(() => document.querySelector('#model-name').textContent.length > 0);
    const name = await page.$eval('#model-name', (e) => e.textContent);
    assert.match(name, /kjv-target/);
  });

  await check('settings: system prompt and greedy sampling', async () => {
    await page.click('#settings-button');
    await page.waitForSelector('#setting-system', { visible: true });
    await setField('#setting-system', 'You answer in the words of the King James Bible.');
    await setField('#setting-temperature', '0');
    await setField('#setting-max_tokens', '12');
    // Not a number: refused where it is typed, the saved value kept.
    await setField('#setting-temperature', 'abc');
    assert.ok(await page.$eval('#setting-temperature-error', (e) => !e.hidden), 'no error shown');
    await setField('#setting-temperature', '0');
    assert.ok(await page.$eval('#setting-temperature-error', (e) => e.hidden), 'error left shown');
    await page.click('#settings-button');
    const s = await page.evaluate(() => JSON.parse(localStorage.getItem('rewind.settings')));
    assert.equal(s.temperature, '0');
    assert.equal(s.max_tokens, '12');
  });

  await check('send a message and see the streamed reply with its figures', async () => {
    await send('In the beginning God created');
    const a = await lastAssistant();
    assert.ok(a.text.trim().length > 0, 'empty reply');
    assert.ok(a.stats.id.startsWith('chatcmpl-'), JSON.stringify(a.stats));
    assert.deepEqual(page.streamed, ['text/event-stream']);
    assert.equal(a.stats.cached, a.stats.resumed);
    assert.equal(Number(a.stats.cached) + Number(a.stats.rerun), Number(a.stats.prompt));
    assert.match(a.statsText, /TTFT [\d.]+ ms/);
    assert.match(await page.$eval('#chat-status', (e) => e.textContent), /^Reply finished/);
    await expectMatchesCache(a.stats);
    await send('And the earth was without form');
    await expectMatchesCache((await lastAssistant()).stats);
  });

  await check('edit the first message: the reply resumes from a checkpoint, as /v1/cache says', async () => {
    const edits = await page.$$('article.msg.user .actions button');
    await edits[0].click();  // Edit on the first user message
    await page.waitForSelector('.edit-input', { visible: true });
    await page.$eval('.edit-input', (el) => { el.value = 'In the beginning was the Word'; });
    await page.click('.save-edit');
    await page.waitForFunction(() => document.body.classList.contains('generating') || document.querySelectorAll('article.msg').length === 2, { timeout: 30000 });
    await idle();
    const n = await page.$$eval('article.msg', (a) => a.length);
    assert.equal(n, 2, 'the conversation is cut after the edited message');
    const a = await lastAssistant();
    const row = await expectMatchesCache(a.stats);
    assert.ok(row.resumed_at > 0, 'resumed from the system prompt checkpoint');
    assert.ok(row.diverged_at >= row.resumed_at && row.diverged_at < row.prompt_tokens);
    assert.equal(row.hit, 'checkpoint');
    edited = a.stats;
  });

  await check('regenerate the reply: an exact repeat re-runs one token', async () => {
    const buttons = await page.$$('article.msg.assistant .actions button');
    const regen = [];
    for (const b of buttons) if ((await b.evaluate((e) => e.textContent)) === 'Regenerate') regen.push(b);
    await regen[regen.length - 1].click();
    await page.waitForFunction((id) => {
      const st = document.querySelectorAll('article.msg.assistant .stats[data-id]');
      return st.length && st[st.length - 1].dataset.id !== id;
    }, { timeout: 30000 }, edited.id);
    await idle();
    const a = await lastAssistant();
    const row = await expectMatchesCache(a.stats);
    assert.equal(row.rerun_tokens, 1);
    assert.equal(row.diverged_at, row.prompt_tokens);
    edited = a.stats;
    await page.screenshot({ path: join(outDir, 'chat.png') });
  });

  await check('the cache view draws the branch, its checkpoints and the last request', async () => {
    await page.click('#tab-cache');
    await page.waitForSelector('#cache-tree g.node', { visible: true, timeout: 20000 });
    const t = await api(server.url, '/v1/cache/tree');
    const view = await page.evaluate(() => {
      const nodes = [...document.querySelectorAll('#cache-tree g.node:not(.aggregate)')];
      const path = nodes.filter((n) => n.dataset.path === '1');
      const kinds = new Set();
      for (const n of path) for (const c of n.querySelectorAll('g.checkpoint')) c.dataset.kinds.split(' ').forEach((k) => kinds.add(k));
      const m = (c) => document.querySelector('#cache-tree g.marker.' + c);
      return {
        nodes: nodes.length,
        pathEnds: path.map((n) => Number(n.dataset.end)),
        kinds: [...kinds],
        diverged: m('diverged') && m('diverged').dataset.pos,
        resumed: m('resumed') && m('resumed').dataset.pos,
        lastCard: document.querySelector('.card.last code').textContent,
      };
    });
    assert.equal(view.nodes, t.nodes.filter((n) => !n.aggregate).length);
    assert.ok(t.total_nodes >= 3, 'two first messages: a shared prefix and two branches');
    assert.equal(view.lastCard, edited.id);
    assert.equal(view.diverged, edited.diverged);
    assert.equal(view.resumed, edited.resumed);
    assert.equal(Math.max(...view.pathEnds), t.last.history_tokens);
    for (const k of ['anchor', 'boundary', 'prompt_end', 'reply_end']) assert.ok(view.kinds.includes(k), k + ' in ' + view.kinds);
    // A branch's details on click.
    await page.click('#cache-tree g.node.on-path');
    await page.waitForFunction(() => /Node \d+/.test(document.querySelector('#node-details h3').textContent));
    const recent = await page.$$eval('#recent tr[data-id]', (rows) => rows.map((r) => r.dataset.id));
    assert.ok(recent.includes(edited.id));
    // The keyboard reaches a node too: focus, Enter, its details.
    const other = await page.$eval('#cache-tree g.node:not(.on-path):not(.aggregate)', (g) => g.dataset.id);
    await page.$eval(`#cache-tree g.node[data-id="${other}"]`, (g) => g.focus());
    assert.equal(await page.evaluate(() => document.activeElement.dataset.id), other);
    await page.keyboard.press('Enter');
    await page.waitForFunction((id) => document.querySelector('#node-details h3').textContent === 'Node ' + id, {}, other);
    await page.screenshot({ path: join(outDir, 'cache.png'), fullPage: true });
    await page.click('#tab-chat');
  });

  await check('model output and user text cannot run script (sanitised, and the CSP behind it)', async () => {
    const payload = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">\n\n**bold** ' +
      '[link](javascript:window.__xss=3) <a href="javascript:window.__xss=4">a</a> <div onclick="window.__xss=5" style="color:red">d</div>' +
      '<iframe src="javascript:window.__xss=6"></iframe><svg onload="window.__xss=7"></svg>\n\n```python\nprint("<b>x</b>")\n```';
    const chunk = (delta, extra = {}) => 'data: ' + JSON.stringify({ id: 'chatcmpl-xss', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: null }], ...extra }) + '\n\n';
    const body = chunk({ role: 'assistant', content: '' }) +
      chunk({ reasoning_content: 'thinking <img src=x onerror="window.__xss=8">' }) +
      chunk({ content: payload }) +
      chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"<script>x</script>"}' } }] }) +
      'data: ' + JSON.stringify({ id: 'chatcmpl-xss', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }) + '\n\n' +
      'data: ' + JSON.stringify({ id: 'chatcmpl-xss', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }) + '\n\n' +
      'data: [DONE]\n\n';
    await page.setRequestInterception(true);
    const onReq = (r) => {
      if (r.url().endsWith('/v1/chat/completions')) r.respond({ status: 200, contentType: 'text/event-stream', body });
      else r.continue();
    };
    page.on('request', onReq);
    await page.click('#new-chat');
    await send('<img src=x onerror="window.__xss = 9"><script>window.__xss = 10</script>');
    page.off('request', onReq);
    await page.setRequestInterception(false);
    const inspect = () => page.evaluate(() => {
      const box = document.querySelector('#messages');
      const bad = [...box.querySelectorAll('*')].filter((el) => [...el.attributes].some((a) => /^on/i.test(a.name) || /javascript:/i.test(a.value) || a.name === 'style'));
      const q = (sel) => box.querySelector(sel);
      return {
        xss: window.__xss,
        scripts: box.querySelectorAll('script, iframe, svg, object, embed').length,
        bad: bad.map((e) => e.outerHTML),
        userText: q('article.msg.user .plain').textContent,
        bold: !!q('article.msg.assistant .md strong'),
        code: !!q('article.msg.assistant pre code.hljs'),
        link: q('article.msg.assistant .md a') ? q('article.msg.assistant .md a').outerHTML : null,
        reasoningFolded: !!q('details.reasoning') && !q('details.reasoning').open,
        tool: q('.tool-call code') && q('.tool-call code').textContent,
        toolArgs: q('.tool-call pre') && q('.tool-call pre').textContent,
        text: q('article.msg.assistant .md').textContent,
      };
    });
    const settle = () => new Promise((res) => setTimeout(res, 500));  // an onerror would have fired
    await settle();
    const r = await inspect();
    assert.equal(r.xss, undefined);
    assert.equal(r.scripts, 0);
    assert.deepEqual(r.bad, []);
    assert.ok(r.userText.includes('<img src=x onerror='), 'user text shown as text');
    assert.ok(r.bold, 'markdown rendered');
    assert.ok(r.code, 'code highlighted');
    assert.ok(r.reasoningFolded, 'reasoning folded');
    assert.equal(r.tool, 'get_weather');
    assert.ok(r.toolArgs.includes('<script>x</script>'), 'tool arguments shown as text');
    // An assistant message edited to markup goes through the same renderer.
    const edits = await page.$$('article.msg.assistant .actions button');
    await edits[0].click();
    await page.$eval('.edit-input', (el) => { el.value = '<img src=y onerror="window.__xss = 11">edited'; });
    await page.click('.save-edit');
    await settle();
    const r2 = await inspect();
    assert.equal(r2.text.trim(), 'edited');
    assert.equal(r2.xss, undefined);
    assert.deepEqual(r2.bad, []);
    await page.screenshot({ path: join(outDir, 'xss.png') });
  });

  await check('the stop button ends a reply in progress', async () => {
    await page.setRequestInterception(true);
    const held = (r) => {
      if (!r.url().endsWith('/v1/chat/completions')) r.continue();
      // else: never answered, so the reply is still in progress when Stop is pressed
    };
    page.on('request', held);
    await page.click('#composer-input');
    await page.keyboard.type('wait for me');
    await page.click('#send');
    await page.waitForSelector('#stop', { visible: true });
    await page.click('#stop');
    await idle();
    page.off('request', held);
    await page.setRequestInterception(false);
    const a = await lastAssistant();
    assert.match(a.statsText, /stopped/);
    // No usage arrived, so no token counts are shown (not "prompt 0 · tokens 0").
    assert.doesNotMatch(a.statsText, /prompt 0|tokens 0/);
  });

  await check('a reply that failed or was stopped before any text is not sent back', async () => {
    await page.setRequestInterception(true);
    const fail = (r) => (r.url().endsWith('/v1/chat/completions') ? r.abort() : r.continue());
    page.on('request', fail);
    await send('this one fails');
    page.off('request', fail);
    await page.setRequestInterception(false);
    const failed = await lastAssistant();
    assert.ok(failed.error, 'the failed reply shows its error');
    const bodies = [];
    const seen = (r) => {
      if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData()));
    };
    page.on('request', seen);
    await send('and this one goes');
    page.off('request', seen);
    assert.equal(bodies.length, 1);
    const msgs = bodies[0].messages;
    assert.ok(!msgs.some((m) => m.role === 'assistant' && m.content === ''), JSON.stringify(msgs));
    assert.equal(msgs[msgs.length - 1].content, 'and this one goes');
  });

  await check('a narrow screen keeps the conversations and fits its width; Escape closes settings', async () => {
    await page.setViewport({ width: 390, height: 800 });
    await page.waitForSelector('#new-chat', { visible: true });
    assert.ok(await page.$eval('.conv', (e) => e.offsetHeight > 0), 'conversation list shown');
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(over <= 0, 'the page is ' + over + ' px wider than the screen');
    await page.click('#settings-button');
    await page.waitForSelector('#setting-seed', { visible: true });
    const seed = await page.$eval('#setting-seed', (e) => e.getBoundingClientRect().right);
    assert.ok(seed <= 390, 'settings field past the screen: ' + seed);
    await page.screenshot({ path: join(outDir, 'narrow.png') });
    await page.keyboard.press('Escape');
    await page.waitForSelector('#settings', { hidden: true });
    await page.setViewport({ width: 1280, height: 900 });
  });

  await check('conversations are kept in the browser across a reload', async () => {
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('.conv');
    const n = await page.$$eval('.conv', (c) => c.length);
    assert.ok(n >= 2, 'two conversations');
    await page.waitForSelector('article.msg');
  });

  await check('another origin cannot call the API (no CORS unless --cors-origin allows it)', async () => {
    const other = server.url.replace('127.0.0.1', 'localhost');
    const p2 = await browser.newPage();
    await p2.goto(other + '/', { waitUntil: 'load' });
    const res = await p2.evaluate(async (url, key) => {
      try {
        const r = await fetch(url + '/v1/models', { headers: { Authorization: 'Bearer ' + key } });
        return 'status ' + r.status;
      } catch (e) {
        return 'blocked';
      }
    }, server.url, KEY);
    assert.equal(res, 'blocked');
    await p2.close();
  });

  await check('many branches: the tree is folded to the nodes asked for and still drawn', async () => {
    // 300 prompts that share a prefix and then part: a node with 300 children.
    const post = (i) => fetch(server.url + '/v1/completions', {
      method: 'POST',
      headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'And the children of Israel numbered ' + (i * 7919 % 100003) + ' of them', max_tokens: 1, temperature: 0 }),
    }).then((r) => r.json());
    for (let i = 0; i < 300; i += 20) await Promise.all(Array.from({ length: 20 }, (_, j) => post(i + j)));
    const all = await api(server.url, '/v1/cache/tree?max_nodes=5000');
    assert.ok(all.total_nodes >= 300, String(all.total_nodes));
    await page.click('#tab-cache');
    await page.select('#max-nodes', '100');
    // The 400-node view drawn before also has folded nodes: wait for the 100-node one.
    await page.waitForFunction(() => document.querySelectorAll('#cache-tree g.node.aggregate').length > 0 &&
      document.querySelectorAll('#cache-tree g.node:not(.aggregate)').length < 200, { timeout: 20000 });
    const drawn = await page.evaluate(() => ({
      nodes: document.querySelectorAll('#cache-tree g.node:not(.aggregate)').length,
      folded: [...document.querySelectorAll('#cache-tree g.node.aggregate')].reduce((a, g) => a + Number(g.dataset.nodes), 0),
      count: document.querySelector('#node-count').textContent,
    }));
    const t = await api(server.url, '/v1/cache/tree?max_nodes=100');
    assert.ok(drawn.nodes <= 100 + t.last.path.length, String(drawn.nodes));
    assert.equal(drawn.nodes + drawn.folded, t.total_nodes);
    assert.equal(drawn.count, t.total_nodes + ' nodes');
    await page.screenshot({ path: join(outDir, 'cache-many.png') });
    await page.click('#tab-chat');
  });

  await check('two models: the picker sends the chosen model; the cache view shows its cache', async () => {
    const two = await startServer(['--model', 'target=' + join(MODELS, 'kjv-target'), '--model', 'draft,small=' + join(MODELS, 'kjv-draft')]);
    // The other port is another origin: its own localStorage, so the key is asked again.
    const p2 = await browser.newPage();
    await p2.setViewport({ width: 1280, height: 820 });
    p2.on('pageerror', (e) => pageErrors.push(String(e)));
    try {
      await p2.goto(two.url + '/', { waitUntil: 'load' });
      await p2.waitForSelector('#key-input', { visible: true });
      await p2.type('#key-input', KEY);
      await p2.click('#key-save');
      await p2.waitForSelector('#model-select', { visible: true });
      const options = await p2.$$eval('#model-select option', (o) => o.map((x) => [x.value, x.textContent]));
      assert.deepEqual(options, [['target', 'target'], ['draft', 'draft, small']]);
      assert.equal(await p2.$eval('#model-select', (e) => e.value), 'target');
      assert.equal(await p2.$eval('#model-name', (e) => e.hidden), true);
      await p2.evaluate(() => localStorage.setItem('rewind.settings', JSON.stringify({ temperature: '0', max_tokens: '10' })));
      const ask = 'And God said, Let there be light';
      // What each model answers alone to the page's request (greedy, the same fields).
      const direct = {};
      for (const m of ['target', 'draft']) {
        const j = await api(two.url, '/v1/chat/completions', { model: m, messages: [{ role: 'user', content: ask }], temperature: 0, max_tokens: 10 });
        direct[m] = j.choices[0].message.content;
      }
      assert.notEqual(direct.target, direct.draft, 'the two models must answer differently for this test');
      const sendOn = async (text) => {
        await p2.click('#composer-input');
        await p2.keyboard.type(text);
        await p2.click('#send');
        await p2.waitForFunction(() => document.body.classList.contains('generating') || document.querySelectorAll('article.msg.assistant .stats[data-id]').length > 0, { timeout: 30000 });
        await p2.waitForFunction(() => !document.body.classList.contains('generating') && !document.querySelector('#send').hidden, { timeout: 60000 });
        return p2.evaluate(() => {
          const all = document.querySelectorAll('article.msg.assistant');
          const m = all[all.length - 1];
          // The reply as the page keeps it (the text before markdown rendering).
          const conv = JSON.parse(localStorage.getItem('rewind.conversations')).find((c) => c.id === localStorage.getItem('rewind.current'));
          return { text: conv.messages[conv.messages.length - 1].content, stats: { ...m.querySelector('.stats').dataset }, statsText: m.querySelector('.stats').textContent };
        });
      };
      const ids = {};
      for (const m of ['draft', 'target']) {
        await p2.select('#model-select', m);
        assert.equal(await p2.evaluate(() => localStorage.getItem('rewind.model')), m);
        await p2.click('#new-chat');
        const a = await sendOn(ask);
        assert.equal(a.stats.model, m, 'the answer names the chosen model');
        assert.match(a.statsText, new RegExp('model ' + m));
        assert.equal(a.text, direct[m], m + ': the reply is the chosen model\'s');
        // The request is in the chosen model's cache, not in the other's.
        const other = m === 'draft' ? 'target' : 'draft';
        assert.ok((await api(two.url, '/v1/cache?model=' + m)).recent.some((r) => r.id === a.stats.id), m + "'s /v1/cache");
        assert.ok(!(await api(two.url, '/v1/cache?model=' + other)).recent.some((r) => r.id === a.stats.id), other + "'s /v1/cache");
        ids[m] = a.stats.id;
      }
      // The choice survives a reload (the last one picked: target); then back to draft.
      await p2.reload({ waitUntil: 'load' });
      await p2.waitForSelector('#model-select', { visible: true });
      await p2.waitForFunction(() => document.querySelector('#model-select').value === 'target');
      await p2.select('#model-select', 'draft');
      await p2.reload({ waitUntil: 'load' });
      await p2.waitForSelector('#model-select', { visible: true });
      await p2.waitForFunction(() => document.querySelector('#model-select').value === 'draft');
      // The cache view draws the chosen model's tree and recent requests; switching redraws.
      await p2.click('#tab-cache');
      for (const m of ['draft', 'target']) {
        await p2.select('#model-select', m);
        await p2.waitForFunction((id) => document.querySelector('.card.last code') && document.querySelector('.card.last code').textContent === id, { timeout: 20000 }, ids[m]);
        const t = await api(two.url, '/v1/cache/tree?model=' + m);
        assert.equal(t.model, m);
        const drawn = await p2.evaluate(() => ({
          count: document.querySelector('#node-count').textContent,
          recent: [...document.querySelectorAll('#recent tr[data-id]')].map((r) => r.dataset.id),
        }));
        assert.equal(drawn.count, t.total_nodes + (t.total_nodes === 1 ? ' node' : ' nodes'));
        const rows = (await api(two.url, '/v1/cache?model=' + m)).recent.map((r) => r.id).reverse();
        assert.deepEqual(drawn.recent, rows, m + ': its own recent requests');
        assert.ok(drawn.recent.includes(ids[m]) && !drawn.recent.includes(ids[m === 'draft' ? 'target' : 'draft']));
      }
      await p2.screenshot({ path: join(outDir, 'two-models.png') });
    } finally {
      await p2.close();
      two.proc.kill('SIGTERM');
    }
  });

  await check('no errors on the page', async () => {
    assert.deepEqual(pageErrors, []);
  });
} finally {
  await browser.close();
  server.proc.kill('SIGTERM');
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
