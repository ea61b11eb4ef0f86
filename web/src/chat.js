// The chat view: conversations in localStorage, streamed replies with a stop button, edit any
// message, regenerate any reply, and per reply how the prefix cache served its prompt.
import { h, clear } from './dom.js';
import { streamChat, AuthError } from './api.js';
import { renderMarkdown } from './markdown.js';
import { currentModel, servedModels } from './models.js';
import { loadConversations, saveConversations, newConversation, loadSettings, samplingOf } from './store.js';

export function mountChat(root, { onAuth, onReplyDone }) {
  let convs = loadConversations();
  let currentId = localStorage.getItem('rewind.current') || (convs[0] && convs[0].id);
  let running = null;  // { controller, convId }

  const list = h('nav', { class: 'conv-list', 'aria-label': 'Conversations' });
  const messagesEl = h('div', { class: 'messages', id: 'messages' });
  // What a screen reader announces: a reply's end (the list itself is redrawn as text streams).
  const status = h('div', { class: 'sr-only', id: 'chat-status', role: 'status', 'aria-live': 'polite' });
  const input = h('textarea', { id: 'composer-input', rows: 3, 'aria-label': 'Message', placeholder: 'Message (Enter sends, Shift+Enter for a new line)' });
  const sendBtn = h('button', { id: 'send', class: 'primary', type: 'submit' }, 'Send');
  const stopBtn = h('button', { id: 'stop', class: 'danger', type: 'button', hidden: true, onclick: () => stop() }, 'Stop');
  const composer = h('form', { class: 'composer', onsubmit: (e) => { e.preventDefault(); send(); } }, input, h('div', { class: 'composer-buttons' }, sendBtn, stopBtn));
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });

  const side = h('aside', { class: 'sidebar' },
    h('button', { id: 'new-chat', class: 'primary wide', onclick: () => { const c = newConversation(); convs.unshift(c); select(c.id); persist(); input.focus(); } }, '+ New chat'),
    list);
  root.append(side, h('section', { class: 'chat-main' }, messagesEl, status, composer));

  function current() {
    return convs.find((c) => c.id === currentId);
  }
  function persist() {
    saveConversations(convs);
    if (currentId) localStorage.setItem('rewind.current', currentId);
  }
  function select(id) {
    currentId = id;
    persist();
    renderList();
    renderMessages();
  }

  function renderList() {
    clear(list);
    for (const c of convs) {
      list.append(h('div', { class: 'conv' + (c.id === currentId ? ' active' : ''), dataset: { id: c.id } },
        h('button', { class: 'conv-title', title: c.title, 'aria-current': c.id === currentId ? 'true' : null, onclick: () => select(c.id) }, c.title || 'Chat'),
        h('button', { class: 'icon', title: 'Delete this conversation', 'aria-label': 'Delete conversation', onclick: () => remove(c.id) }, '\u00d7')));
    }
  }

  function remove(id) {
    const c = convs.find((x) => x.id === id);
    if (c && c.messages.length && !window.confirm('Delete the conversation "' + (c.title || 'Chat') + '"? It cannot be undone.')) return;
    if (running && running.convId === id) stop();
    convs = convs.filter((c) => c.id !== id);
    if (currentId === id) currentId = convs[0] && convs[0].id;
    persist();
    renderList();
    renderMessages();
  }

  // ---- messages ----

  const views = [];  // per message: { el, body, stats } for in-place updates while streaming

  function renderMessages() {
    clear(messagesEl);
    views.length = 0;
    const c = current();
    if (!c || c.messages.length === 0) {
      messagesEl.append(h('div', { class: 'empty' },
        h('h2', null, 'rewind'),
        h('p', null, 'Send a message. Edit any earlier message or regenerate a reply, and each reply shows how much of its prompt the prefix cache resumed; the Cache tab draws the tree.')));
      return;
    }
    c.messages.forEach((m, i) => {
      const v = messageView(c, m, i);
      views.push(v);
      messagesEl.append(v.el);
    });
    messagesEl.scrollTop = messagesEl.scrollHeight;
  }

  function fillBody(body, m) {
    clear(body);
    if (m.role === 'assistant') {
      if (m.reasoning) {
        body.append(h('details', { class: 'reasoning' },
          h('summary', null, m.content || m.tool_calls ? 'Reasoning' : 'Thinking\u2026'),
          h('div', { class: 'reasoning-text' }, m.reasoning)));
      }
      const md = h('div', { class: 'md' });
      md.innerHTML = renderMarkdown(m.content || '');  // sanitised (markdown.js)
      body.append(md);
      if (m.content && !m.content.trim())
        body.append(h('div', { class: 'note' }, '(whitespace only: ' + m.content.length + ' characters)'));
      for (const tc of m.tool_calls || []) {
        const fn = tc.function || {};
        let args = fn.arguments || '';
        try {
          args = JSON.stringify(JSON.parse(args), null, 2);
        } catch (_) {
          /* shown as sent */
        }
        body.append(h('div', { class: 'tool-call' },
          h('div', { class: 'tool-name' }, 'tool call: ', h('code', null, fn.name || '?')),
          h('pre', null, args)));
      }
      if (m.error) body.append(h('div', { class: 'error' }, m.error));
    } else {
      body.append(h('div', { class: 'plain' }, m.content));
    }
  }

  function statsView(m) {
    const st = m.stats;
    if (!st) return h('div', { class: 'stats' });
    const r = st.rewind || {};
    const tps = st.completion_tokens > 1 && r.decode_ms > 0 ? ((st.completion_tokens - 1) * 1000) / r.decode_ms : null;
    const item = (label, value, key, title) => h('span', { class: 'stat', title, dataset: { key } }, label + ' ', h('b', null, String(value)));
    return h('div', { class: 'stats', dataset: { id: st.id || '', model: st.model || '', prompt: st.prompt_tokens, cached: r.cached_tokens ?? '', rerun: r.rerun_tokens ?? '', diverged: r.diverged_at ?? '', resumed: r.resumed_at ?? '' } },
      st.model && servedModels().length > 1 && item('model', st.model, 'model', 'the model that answered'),
      st.prompt_tokens != null && item('prompt', st.prompt_tokens, 'prompt', 'prompt tokens'),
      r.hit !== undefined && [
        item('cached', r.cached_tokens, 'cached', 'prompt tokens resumed from the prefix cache'),
        item('re-run', r.rerun_tokens, 'rerun', 'prompt tokens computed for this reply'),
        item('diverged at', r.diverged_at, 'diverged', 'the prompt left the cached tokens here'),
        r.hit !== 'miss' && item('resumed at', r.resumed_at, 'resumed', 'the checkpoint it resumed from (' + r.hit + ')'),
        r.lost_to_spacing > 0 && item('no checkpoint for', r.lost_to_spacing, 'lost', 'tokens that matched the cache but were re-run: no checkpoint lay closer to where the prompt diverged'),
        h('span', { class: 'hit hit-' + r.hit }, r.hit),
        item('TTFT', r.ttft_ms.toFixed(1) + ' ms', 'ttft', 'request received to first token'),
      ],
      tps !== null && item('decode', tps.toFixed(1) + ' tok/s', 'tps', 'tokens per second after the first'),
      st.completion_tokens != null && item('tokens', st.completion_tokens, 'completion', 'generated tokens'),
      st.finish && h('span', { class: 'finish' }, st.finish),
      // The request id, as the Cache view's "Recent requests" lists it (its end, to match by eye).
      st.id && h('span', { class: 'stat req-id', title: st.id }, 'id ', h('code', null, '\u2026' + st.id.slice(-6))));
  }

  function messageView(c, m, i) {
    const body = h('div', { class: 'body' });
    fillBody(body, m);
    const actions = h('div', { class: 'actions' });
    const busy = () => running !== null;
    actions.append(h('button', { class: 'link', title: 'Edit this message', onclick: () => { if (!busy()) startEdit(c, i, v); } }, 'Edit'));
    if (m.role === 'assistant')
      actions.append(h('button', { class: 'link', title: 'Generate this reply again', onclick: () => { if (!busy()) regenerate(c, i); } }, 'Regenerate'));
    const copy = h('button', { class: 'link', title: 'Copy the text', onclick: () => {
      if (!navigator.clipboard) return;
      navigator.clipboard.writeText(m.content || '').then(() => {
        copy.textContent = 'Copied';
        setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
      }, () => { copy.textContent = 'Copy failed'; });
    } }, 'Copy');
    actions.append(copy);
    const stats = m.role === 'assistant' ? statsView(m) : null;
    const el = h('article', { class: 'msg ' + m.role, dataset: { index: i, role: m.role } },
      h('div', { class: 'who' }, m.role === 'user' ? 'You' : 'Assistant'), body, stats, actions);
    const v = { el, body, stats, m };
    return v;
  }

  function startEdit(c, i, v) {
    const m = c.messages[i];
    const ta = h('textarea', { class: 'edit-input', rows: Math.min(12, (m.content || '').split('\n').length + 1) });
    ta.value = m.content || '';
    const save = h('button', { class: 'primary save-edit' }, m.role === 'user' ? 'Save & send' : 'Save');
    const cancel = h('button', { class: 'cancel-edit' }, 'Cancel');
    clear(v.body).append(ta, h('div', { class: 'edit-buttons' }, save, cancel));
    ta.focus();
    cancel.onclick = () => fillBody(v.body, m);
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') cancel.onclick();
      else if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) save.onclick();
    });
    save.onclick = () => {
      if (m.role === 'user') {
        c.messages = c.messages.slice(0, i);
        c.messages.push({ role: 'user', content: ta.value });
        touch(c);
        renderMessages();
        generate(c);
      } else {
        m.content = ta.value;
        touch(c);
        renderMessages();
      }
    };
  }

  function regenerate(c, i) {
    c.messages = c.messages.slice(0, i);
    touch(c);
    renderMessages();
    generate(c);
  }

  function touch(c) {
    c.updated = Date.now();
    const first = c.messages.find((m) => m.role === 'user');
    if (first) c.title = first.content.slice(0, 48) || 'Chat';
    persist();
    renderList();
  }

  function send() {
    const text = input.value;
    if (!text.trim() || running) return;
    let c = current();
    if (!c) {
      c = newConversation();
      convs.unshift(c);
      currentId = c.id;
    }
    c.messages.push({ role: 'user', content: text });
    input.value = '';
    touch(c);
    renderMessages();
    generate(c);
  }

  function stop() {
    if (running) running.controller.abort();
  }

  function setRunning(r) {
    running = r;
    sendBtn.hidden = !!r;
    stopBtn.hidden = !r;
    document.body.classList.toggle('generating', !!r);
  }

  async function generate(c) {
    const settings = loadSettings();
    const msgs = [];
    if (settings.system.trim()) msgs.push({ role: 'system', content: settings.system });
    for (const m of c.messages) {
      // A reply with no text and no tool calls (it failed, or was stopped, before any came) is
      // no turn of the conversation: sent, it would be an empty assistant message.
      if (m.role === 'assistant' && !m.content && !(m.tool_calls && m.tool_calls.length)) continue;
      const o = { role: m.role, content: m.content || '' };
      if (m.tool_calls && m.tool_calls.length) o.tool_calls = m.tool_calls;
      msgs.push(o);
    }
    const m = { role: 'assistant', content: '', reasoning: '' };
    c.messages.push(m);
    renderMessages();
    const v = views[views.length - 1];
    const controller = new AbortController();
    setRunning({ controller, convId: c.id });
    v.el.classList.add('pending');  // a mark after the text until the reply ends
    let pending = false;
    const redraw = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        fillBody(v.body, m);
        messagesEl.scrollTop = messagesEl.scrollHeight;
      });
    };
    // Token counts come with the usage chunk at the end; a stopped reply has none.
    const stats = { id: null, model: null, prompt_tokens: null, completion_tokens: null, finish: null };
    const model = currentModel();  // none: the server's only (or first) model
    try {
      for await (const ev of streamChat({ ...(model ? { model } : {}), messages: msgs, ...samplingOf(settings) }, controller.signal)) {
        if (ev.id) stats.id = ev.id;
        if (ev.model) stats.model = ev.model;
        const ch = ev.choices && ev.choices[0];
        if (ch) {
          const d = ch.delta || {};
          if (d.reasoning_content) m.reasoning += d.reasoning_content;
          if (d.content) m.content += d.content;
          if (d.tool_calls) m.tool_calls = (m.tool_calls || []).concat(d.tool_calls);
          if (ch.finish_reason) stats.finish = ch.finish_reason;
          redraw();
        }
        if (ev.usage) {
          stats.prompt_tokens = ev.usage.prompt_tokens;
          stats.completion_tokens = ev.usage.completion_tokens;
          stats.rewind = ev.usage.rewind;
        }
      }
      m.stats = stats;
    } catch (e) {
      if (e.name === 'AbortError') {
        stats.finish = 'stopped';
        m.stats = stats;
      } else {
        // fetch's own words for an unreachable server ("Failed to fetch") say little.
        m.error = e instanceof TypeError ? 'Could not reach the server (' + e.message + ')' : String(e.message || e);
        if (e instanceof AuthError) onAuth();
      }
    } finally {
      if (!m.reasoning) delete m.reasoning;
      setRunning(null);
      touch(c);
      v.el.classList.remove('pending');
      status.textContent = m.error ? 'Reply failed: ' + m.error
        : stats.finish === 'stopped' ? 'Reply stopped'
        : 'Reply finished' + (stats.finish ? ' (' + stats.finish + ')' : '');
      if (currentId === c.id) {
        fillBody(v.body, m);
        const fresh = statsView(m);
        v.stats.replaceWith(fresh);
        v.stats = fresh;
      }
      onReplyDone();
    }
  }

  if (!current() && convs.length) currentId = convs[0].id;
  renderList();
  renderMessages();
  return { focus: () => input.focus() };
}
