// The model the page talks to when the server serves several: GET /v1/models lists every name,
// `root` says which served model a name belongs to (its aliases share it). The choice is kept
// in this browser's localStorage; with one model nothing is sent and the server picks it.
const KEY = 'rewind.model';
let models = [];  // [{ id, names }], the server's order
let chosen = localStorage.getItem(KEY) || '';
const listeners = [];

// /v1/models' entries grouped by served model.
export function groupModels(data) {
  const out = [];
  for (const e of data || []) {
    const root = e.root || e.id;
    const m = out.find((x) => x.id === root);
    if (m) {
      if (!m.names.includes(e.id)) m.names.push(e.id);
    } else {
      out.push({ id: root, names: root === e.id ? [e.id] : [root, e.id] });
    }
  }
  return out;
}

// The served models, once known: views that asked before (with no model) are told when that
// makes the current model another one.
export function setModels(list) {
  const before = currentModel();
  models = list;
  if (models.length > 1 && !models.some((m) => m.id === chosen)) chosen = models[0].id;
  if (currentModel() !== before) for (const f of listeners) f(currentModel());
}
export function servedModels() {
  return models;
}
// The model a request names: '' when the server serves one (or the list is not known yet).
export function currentModel() {
  return models.length > 1 ? chosen : '';
}
export function chooseModel(id) {
  if (id === chosen) return;
  chosen = id;
  localStorage.setItem(KEY, id);
  for (const f of listeners) f(id);
}
export function onModelChange(f) {
  listeners.push(f);
}
// `path` with `?model=` (or `&model=`) of the chosen model when there is a choice.
export function withModel(path) {
  const m = currentModel();
  return m ? path + (path.includes('?') ? '&' : '?') + 'model=' + encodeURIComponent(m) : path;
}
