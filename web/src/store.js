// Conversations and settings, kept in this browser's localStorage.
const CONVS = 'rewind.conversations';
const SETTINGS = 'rewind.settings';

export const defaultSettings = {
  system: '',
  temperature: '',
  top_p: '',
  top_k: '',
  min_p: '',
  max_tokens: '256',
  seed: '',
};

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch (_) {
    return fallback;
  }
}

export function loadSettings() {
  return { ...defaultSettings, ...load(SETTINGS, {}) };
}
export function saveSettings(s) {
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}

export function loadConversations() {
  const c = load(CONVS, []);
  return Array.isArray(c) ? c : [];
}
export function saveConversations(list) {
  localStorage.setItem(CONVS, JSON.stringify(list));
}

export function newConversation() {
  const now = Date.now();
  return { id: 'c' + now.toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', created: now, updated: now, messages: [] };
}

// The request's sampling fields from the settings (blank fields are left to the server).
export function samplingOf(s) {
  const out = {};
  const num = (k, parse) => {
    const v = String(s[k] ?? '').trim();
    if (v === '') return;
    const x = parse(v);
    if (!Number.isNaN(x)) out[k] = x;
  };
  num('temperature', parseFloat);
  num('top_p', parseFloat);
  num('top_k', (v) => parseInt(v, 10));
  num('min_p', parseFloat);
  num('max_tokens', (v) => parseInt(v, 10));
  num('seed', (v) => parseInt(v, 10));
  return out;
}
