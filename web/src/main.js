// The page's shell: header with the model (a picker when the server serves several), the Chat
// and Cache tabs, settings, and the API key prompt (shown when the server answers 401).
import './style.css';
import { h, clear } from './dom.js';
import { getJson, apiKey, setApiKey, AuthError } from './api.js';
import { loadSettings, saveSettings } from './store.js';
import { mountChat } from './chat.js';
import { mountCacheView } from './cacheview.js';
import { groupModels, setModels, currentModel, chooseModel, onModelChange } from './models.js';

const app = document.getElementById('app');
const modelName = h('span', { class: 'model', id: 'model-name' }, '');
const modelPicker = h('select', { class: 'model-picker', id: 'model-select', title: 'The model this page talks to', 'aria-label': 'Model', hidden: true, onchange: () => chooseModel(modelPicker.value) });
const chatTab = h('a', { href: '#/chat', class: 'tab', id: 'tab-chat' }, 'Chat');
const cacheTab = h('a', { href: '#/cache', class: 'tab', id: 'tab-cache' }, 'Cache');
const settingsBtn = h('button', { class: 'icon-text', id: 'settings-button', 'aria-controls': 'settings', 'aria-expanded': 'false', onclick: () => toggleSettings() }, 'Settings');
const chatRoot = h('main', { class: 'view chat-view', id: 'chat-view' });
const cacheRoot = h('main', { class: 'view cache-view', id: 'cache-view', hidden: true });
const settingsPanel = h('aside', { class: 'settings', id: 'settings', hidden: true });
const keyDialog = h('div', { class: 'modal-back', id: 'key-dialog', hidden: true });

app.append(
  h('header', { class: 'top' }, h('span', { class: 'brand' }, 'rewind'), modelName, modelPicker, h('nav', { class: 'tabs' }, chatTab, cacheTab), h('span', { class: 'spacer' }), settingsBtn),
  h('div', { class: 'views' }, chatRoot, cacheRoot, settingsPanel),
  keyDialog);

let authPending = false;
function askKey() {
  if (authPending) return;
  authPending = true;
  const input = h('input', { type: 'password', id: 'key-input', placeholder: 'API key', autocomplete: 'off', 'aria-label': 'API key' });
  const close = () => {
    keyDialog.hidden = true;
    authPending = false;
  };
  // A key in store that got this 401 was refused: say so, rather than asking as if for the first time.
  const refused = apiKey() !== '';
  const form = h('form', { class: 'modal', role: 'dialog', 'aria-modal': 'true', 'aria-labelledby': 'key-title' },
    h('h3', { id: 'key-title' }, 'API key'),
    refused ? h('p', { class: 'error', id: 'key-refused' }, 'The server refused the key this browser had.') : null,
    h('p', null, 'This server was started with --api-key. Enter the key; it is kept in this browser only.'),
    input,
    h('div', { class: 'edit-buttons' },
      h('button', { type: 'button', id: 'key-cancel', onclick: close }, 'Cancel'),
      h('button', { class: 'primary', type: 'submit', id: 'key-save' }, 'Save')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setApiKey(input.value.trim());
    close();
    loadModel();
    if (!cacheRoot.hidden) cache.show();
  });
  form.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') close();
  });
  clear(keyDialog).append(form);
  keyDialog.hidden = false;
  input.focus();
}

async function loadModel() {
  try {
    const list = groupModels((await getJson('/v1/models')).data);
    setModels(list);
    const several = list.length > 1;
    if (several) {
      clear(modelPicker).append(...list.map((m) => h('option', { value: m.id }, m.names.join(', '))));
      modelPicker.value = currentModel();
    }
    modelPicker.hidden = !several;
    modelName.hidden = several;
    modelName.textContent = list[0] ? list[0].names.join(', ') : '';
    showTitle();
  } catch (e) {
    if (e instanceof AuthError) askKey();
    else modelName.textContent = String(e.message || e);
  }
}

function showTitle() {
  document.title = 'rewind \u00b7 ' + (currentModel() || modelName.textContent);
}
onModelChange(showTitle);

const cache = mountCacheView(cacheRoot, { onAuth: askKey });
const chat = mountChat(chatRoot, { onAuth: askKey, onReplyDone: () => { if (!cacheRoot.hidden) cache.refresh(); } });

function route() {
  const onCache = location.hash === '#/cache';
  chatRoot.hidden = onCache;
  cacheRoot.hidden = !onCache;
  chatTab.classList.toggle('active', !onCache);
  cacheTab.classList.toggle('active', onCache);
  if (onCache) cache.show();
  else cache.hide();
}
window.addEventListener('hashchange', route);

function field(settings, key, label, attrs) {
  const input = h(attrs && attrs.rows ? 'textarea' : 'input', { id: 'setting-' + key, ...attrs });
  input.value = settings[key] ?? '';
  const problem = h('span', { class: 'error', id: 'setting-' + key + '-error', hidden: true });
  // Numeric fields take a number or nothing (the server's default); anything else is refused
  // here, not dropped silently when a request is made.
  const numeric = attrs && (attrs.inputmode === 'decimal' || attrs.inputmode === 'numeric');
  input.addEventListener('change', () => {
    const v = input.value.trim();
    const bad = numeric && v !== '' && !(attrs.inputmode === 'numeric' ? /^-?\d+$/ : /^-?(\d+\.?\d*|\.\d+)(e-?\d+)?$/i).test(v);
    problem.hidden = !bad;
    problem.textContent = bad ? 'not a number; not saved' : '';
    input.setAttribute('aria-invalid', bad ? 'true' : 'false');
    if (bad) return;
    const s = loadSettings();
    s[key] = input.value;
    saveSettings(s);
  });
  return h('label', { class: 'field' }, h('span', null, label), input, problem);
}

function toggleSettings() {
  settingsBtn.setAttribute('aria-expanded', settingsPanel.hidden ? 'true' : 'false');
  if (!settingsPanel.hidden) {
    settingsPanel.hidden = true;
    settingsBtn.focus();
    return;
  }
  const st = loadSettings();
  clear(settingsPanel).append(
    h('h3', null, 'Settings'),
    field(st, 'system', 'System prompt', { rows: 5, placeholder: 'none' }),
    h('div', { class: 'grid2' },
      field(st, 'temperature', 'Temperature', { inputmode: 'decimal', placeholder: 'model default' }),
      field(st, 'top_p', 'Top-p', { inputmode: 'decimal', placeholder: 'model default' }),
      field(st, 'top_k', 'Top-k', { inputmode: 'numeric', placeholder: 'model default' }),
      field(st, 'min_p', 'Min-p', { inputmode: 'decimal', placeholder: 'model default' }),
      field(st, 'max_tokens', 'Max tokens', { inputmode: 'numeric', placeholder: 'rest of the context' }),
      field(st, 'seed', 'Seed', { inputmode: 'numeric', placeholder: 'random' })),
    h('p', { class: 'muted' }, 'Blank fields take the server\'s defaults. Settings and conversations stay in this browser.'),
    h('div', { class: 'edit-buttons' },
      apiKey() ? h('button', { onclick: () => { setApiKey(''); toggleSettings(); } }, 'Forget the API key') : null,
      h('button', { class: 'primary', onclick: () => toggleSettings() }, 'Done')));
  settingsPanel.hidden = false;
}

// Escape closes the settings panel.
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && !settingsPanel.hidden && keyDialog.hidden) toggleSettings();
});

route();
loadModel();
if (!chatRoot.hidden) chat.focus();
