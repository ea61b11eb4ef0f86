// The cache view: the prefix cache's radix tree drawn live from /v1/cache/tree, laid out along
// token positions so that where branches split, where checkpoints sit and where the last
// request diverged and resumed can be seen at a glance.
import { h, s, clear, fmtBytes } from './dom.js';
import { getJson, AuthError } from './api.js';
import { withModel, onModelChange } from './models.js';

// Checkpoint kinds, most telling first (a snapshot is drawn as its first kind here).
const KINDS = [
  { kind: 'reply_end', label: 'reply end', shape: 'circle' },
  { kind: 'prompt_end', label: 'prompt end', shape: 'triangle' },
  { kind: 'anchor', label: 'system prompt end', shape: 'square' },
  { kind: 'boundary', label: 'turn boundary', shape: 'diamond' },
  { kind: 'grid', label: 'grid', shape: 'tick' },
];
const POLL_MS = 1500;

function mainKind(kinds) {
  for (const k of KINDS) if (kinds.includes(k.kind)) return k;
  return { kind: 'none', label: 'checkpoint', shape: 'tick' };
}

function mark(shape, x, y, cls) {
  const r = 5;
  switch (shape) {
    case 'circle': return s('circle', { cx: x, cy: y, r, class: cls });
    case 'square': return s('rect', { x: x - r + 1, y: y - r + 1, width: 2 * r - 2, height: 2 * r - 2, class: cls });
    case 'diamond': return s('polygon', { points: `${x},${y - r} ${x + r},${y} ${x},${y + r} ${x - r},${y}`, class: cls });
    case 'triangle': return s('polygon', { points: `${x},${y - r} ${x + r},${y + r - 1} ${x - r},${y + r - 1}`, class: cls });
    default: return s('rect', { x: x - 1, y: y - 7, width: 2, height: 14, class: cls });
  }
}

// A tree node the keyboard reaches too: Tab focuses it, Enter or Space shows its details.
function focusable(g, label, show) {
  g.setAttribute('tabindex', '0');
  g.setAttribute('role', 'button');
  g.setAttribute('aria-label', label);
  g.addEventListener('click', show);
  g.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      show();
    }
  });
}

export function mountCacheView(root, { onAuth }) {
  let timer = null;
  let lastVersion = null;
  let lastWidth = 0;
  let data = null;
  let cache = null;
  let selected = null;

  const sizeSel = h('select', { id: 'max-nodes', title: 'Nodes listed before small branches are folded together' },
    ...[100, 400, 2000].map((n) => h('option', { value: n, selected: n === 400 }, String(n) + ' nodes')));
  const live = h('input', { type: 'checkbox', id: 'live', checked: true });
  const status = h('span', { class: 'muted', id: 'cache-status' });
  const summary = h('div', { class: 'cache-summary', id: 'cache-summary' });
  const legend = h('div', { class: 'legend' },
    h('b', null, 'Checkpoints: '),
    ...KINDS.map((k) => h('span', { class: 'legend-item' }, legendMark(k), ' ' + k.label)),
    h('span', { class: 'legend-item' }, h('span', { class: 'swatch pinned' }), ' pinned'),
    h('span', { class: 'legend-item' }, h('span', { class: 'swatch evict' }), ' next to evict'),
    h('span', { class: 'legend-item' }, h('span', { class: 'swatch path' }), ' last request'),
    h('span', { class: 'legend-item' }, h('span', { class: 'swatch age' }), ' recently used \u2192 old'));
  const svgBox = h('div', { class: 'tree-box', id: 'tree-box' });
  const details = h('div', { class: 'details', id: 'node-details' }, h('p', { class: 'muted' }, 'Click a branch for its figures.'));
  const recent = h('div', { class: 'recent', id: 'recent' });

  root.append(
    h('div', { class: 'cache-toolbar' },
      h('h2', null, 'Prefix cache'),
      h('label', null, live, ' live'),
      sizeSel,
      h('button', { onclick: () => refresh(true) }, 'Refresh'),
      status),
    summary,
    legend,
    h('div', { class: 'cache-body' }, svgBox, details),
    recent);
  sizeSel.addEventListener('change', () => refresh(true));
  // Another model: another cache, drawn from scratch (an answer for the old one is dropped).
  onModelChange(() => {
    data = null;
    cache = null;
    selected = null;
    lastVersion = null;
    ++asked;
    clear(svgBox);
    clear(summary);
    clear(recent);
    if (!root.hidden) refresh(true);
  });
  live.addEventListener('change', () => schedule());

  function legendMark(k) {
    const svg = s('svg', { width: 14, height: 14, viewBox: '0 0 14 14', class: 'legend-mark' });
    svg.append(mark(k.shape, 7, 7, 'ckpt-' + k.kind));
    return svg;
  }

  let asked = 0;  // the newest refresh; an older answer that arrives later is dropped
  async function refresh(force) {
    const mine = ++asked;
    try {
      const [tree, c] = await Promise.all([
        getJson(withModel('/v1/cache/tree?max_nodes=' + sizeSel.value)),
        getJson(withModel('/v1/cache')),
      ]);
      if (mine !== asked) return;
      cache = c;
      const width = svgBox.clientWidth;
      if (force || tree.version !== lastVersion || width !== lastWidth || !data) {
        data = tree;
        lastVersion = tree.version;
        lastWidth = width;
        render();
      }
      renderRecent();
      status.textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      status.textContent = String(e.message || e);
      if (e instanceof AuthError) onAuth();
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = null;
    if (!live.checked || root.hidden) return;
    timer = setTimeout(async () => {
      if (document.visibilityState === 'visible') await refresh(false);
      schedule();
    }, POLL_MS);
  }

  function renderSummary() {
    const t = data;
    const budget = t.budget_bytes || 1;
    const pct = (b) => Math.min(100, (100 * b) / budget).toFixed(2) + '%';
    const kb = t.snapshot_bytes_by_kind;
    const bar = h('div', { class: 'budget-bar', title: 'KV pages + snapshots against the budget' },
      h('div', { class: 'seg pages', dataset: { w: pct(t.bytes.pages) } }),
      h('div', { class: 'seg snaps', dataset: { w: pct(t.bytes.snapshots) } }));
    for (const seg of bar.children) seg.style.width = seg.dataset.w;  // CSSOM: allowed by the CSP
    clear(summary).append(
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Budget'),
        h('div', { class: 'value' }, fmtBytes(t.bytes.total) + ' / ' + fmtBytes(t.budget_bytes), t.over_budget ? h('span', { class: 'error' }, ' over budget (pinned)') : null),
        bar,
        h('div', { class: 'muted' }, h('span', { class: 'dot pages' }), ' KV pages ' + fmtBytes(t.bytes.pages) + '  ', h('span', { class: 'dot snaps' }), ' snapshots ' + fmtBytes(t.bytes.snapshots))),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Tree'),
        h('div', { class: 'value', id: 'node-count' }, t.total_nodes + (t.total_nodes === 1 ? ' node' : ' nodes')),
        h('div', { class: 'muted' }, t.listed_nodes < t.total_nodes ? t.listed_nodes + ' drawn, the rest folded' : 'all drawn'),
        h('div', { class: 'muted' }, t.active_leases + ' pinned by running requests')),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Snapshot bytes by kind'),
        h('table', { class: 'kinds' }, ...[...KINDS, { kind: 'none', label: 'other' }].filter((k) => kb[k.kind]).map((k) => h('tr', null, h('td', null, k.label), h('td', { class: 'num' }, fmtBytes(kb[k.kind])))))),
      cache && h('div', { class: 'card' }, h('div', { class: 'label' }, 'Lookups'),
        h('div', { class: 'value' }, String(cache.hits.lookups)),
        h('div', { class: 'muted' }, `exact ${cache.hits.exact} \u00b7 extension ${cache.hits.extension} \u00b7 checkpoint ${cache.hits.checkpoint} \u00b7 miss ${cache.hits.misses}`),
        h('div', { class: 'muted' }, `tokens reused ${cache.tokens.reused} \u00b7 re-run ${cache.tokens.rerun}`),
        h('div', { class: 'muted' }, `grid every ${t.interval} tokens, pages of ${t.page_tokens}`)),
      t.last && h('div', { class: 'card last' }, h('div', { class: 'label' }, 'Last request'),
        h('div', { class: 'value' }, h('code', null, t.last.id || '#' + t.last.engine_id)),
        h('div', { class: 'muted' }, `prompt ${t.last.prompt_tokens} \u00b7 `, h('span', { class: 'diverged-text' }, `diverged at ${t.last.diverged_at}`), ' \u00b7 ', h('span', { class: 'resumed-text' }, `resumed at ${t.last.resumed_at}`)),
        h('div', { class: 'muted' }, `re-ran ${t.last.prompt_tokens - t.last.resumed_at} prompt tokens`)));
  }

  function render() {
    if (!data.enabled) {
      clear(summary);
      clear(svgBox).append(h('p', { class: 'muted' }, 'The prefix cache is off (rewind serve --no-cache).'));
      return;
    }
    renderSummary();
    const nodes = data.nodes;
    clear(svgBox);
    if (nodes.length === 0) {
      svgBox.append(h('p', { class: 'muted', id: 'tree-empty' }, 'The cache is empty: send a message in Chat.'));
      return;
    }
    // Rows: a node's first child continues its row, later children open rows below it.
    const kids = nodes.map(() => []);
    const roots = [];
    nodes.forEach((n, i) => (n.parent < 0 ? roots : kids[n.parent]).push(i));
    // Folded branches go last, so the drawn children keep the parent's line.
    const aggLast = (a, b) => (nodes[a].aggregate ? 1 : 0) - (nodes[b].aggregate ? 1 : 0);
    roots.sort(aggLast);
    kids.forEach((k) => k.sort(aggLast));
    const row = new Array(nodes.length);
    let rows = 0;
    const stack = roots.slice().reverse().map((i) => [i, -1]);
    while (stack.length) {
      const [i, r] = stack.pop();
      row[i] = r >= 0 ? r : rows++;
      const k = kids[i];
      for (let j = k.length - 1; j >= 0; j--) stack.push([k[j], j === 0 ? row[i] : -1]);
    }
    // Later children were given rows in visiting order; that order is pre-order, so rows stay
    // below their parents.
    const onPath = new Set(data.last ? data.last.path : []);
    const maxEnd = Math.max(1, ...nodes.map((n) => n.end));
    const W = Math.max(600, svgBox.clientWidth - 4);
    const L = 12;
    const R = 96;
    const x = (p) => L + (p * (W - L - R)) / maxEnd;
    const ROW = rows > 60 ? 17 : 26;  // denser rows for big trees
    const y = (r) => 22 + r * ROW;
    const maxAge = Math.max(1, ...nodes.filter((n) => !n.aggregate).map((n) => n.age));
    const svg = s('svg', { width: W, height: y(rows) + 10, class: 'tree', id: 'cache-tree', role: 'img', 'aria-label': 'prefix cache tree' });
    // Position axis.
    const axis = s('g', { class: 'axis' });
    const step = niceStep(maxEnd / 8);
    for (let p = 0; p <= maxEnd; p += step) {
      axis.append(s('line', { x1: x(p), x2: x(p), y1: 10, y2: y(rows), class: 'grid-line' }), s('text', { x: x(p) + 2, y: 9, class: 'axis-label' }, String(p)));
    }
    svg.append(axis);
    const links = s('g', { class: 'links' });
    const bars = s('g', { class: 'bars' });
    svg.append(links, bars);
    nodes.forEach((n, i) => {
      const yy = y(row[i]);
      if (n.parent >= 0 && row[n.parent] !== row[i]) {
        const py = y(row[n.parent]);
        links.append(s('path', { d: `M${x(n.start)},${py} L${x(n.start)},${yy}`, class: 'link' + (onPath.has(i) ? ' on-path' : '') }));
      }
      const x0 = x(n.start);
      const w = Math.max(2, x(n.end) - x0);
      if (n.aggregate) {
        const g = s('g', { class: 'node aggregate', dataset: { start: n.start, end: n.end, nodes: n.subtree.nodes } },
          s('rect', { x: x0, y: yy - 6, width: w, height: 12, rx: 3, class: 'agg-bar' }),
          s('text', { x: x0 + w + 4, y: yy + 4, class: 'bar-label' }, `+${n.subtree.nodes} nodes \u00b7 ${n.subtree.tokens} tok`),
          s('title', null, `${n.subtree.nodes} smaller branches folded together: ${n.subtree.tokens} tokens, ${n.subtree.snapshots} snapshots, ${fmtBytes(n.subtree.bytes)}`));
        focusable(g, `${n.subtree.nodes} folded branches, ${n.subtree.tokens} tokens`, () => showDetails(n));
        bars.append(g);
        return;
      }
      const t = n.age / maxAge;
      const cls = ['node'];
      if (onPath.has(i)) cls.push('on-path');
      if (n.pinned) cls.push('pinned');
      if (n.evict_rank > 0 && n.evict_rank <= 3) cls.push('evict-soon');
      const g = s('g', { class: cls.join(' '), dataset: { id: n.id, start: n.start, end: n.end, index: i, path: onPath.has(i) ? '1' : '0', snapshots: n.snapshots.length } });
      const bar = s('rect', { x: x0, y: yy - 6, width: w, height: 12, rx: 3, class: 'bar age-' + Math.min(4, Math.floor(t * 5)) });
      g.append(bar);
      const tok = n.end - n.start;
      // The label inside a wide bar, else after it unless a child continues the row there.
      const label = `${tok} tok` + (n.pinned ? ' \u00b7 pinned' : '') + (n.shared_pages ? ` \u00b7 ${n.shared_pages} shared` : '');
      const rowGoesOn = kids[i].length > 0;
      if (w >= 7 * label.length + 8) g.append(s('text', { x: x0 + 5, y: yy + 4, class: 'bar-label inside' }, label));
      else if (!rowGoesOn) g.append(s('text', { x: x0 + w + 4, y: yy + 4, class: 'bar-label' }, label));
      g.append(s('title', null, `node ${n.id}: positions ${n.start}\u2013${n.end} (${tok} tokens)\n${n.pages} KV pages (${n.shared_pages} shared), ${fmtBytes(n.kv_bytes)}\n${n.snapshots.length} snapshots\nlast used ${n.age} cache operations ago` + (n.evict_rank ? `\neviction order: ${n.evict_rank}` : '') + (n.pinned ? '\npinned by a running request' : '')));
      for (const sn of n.snapshots) {
        const k = mainKind(sn.kinds);
        const m = mark(k.shape, x(sn.pos), yy, 'ckpt ckpt-' + k.kind);
        const mg = s('g', { class: 'checkpoint', dataset: { pos: sn.pos, kinds: sn.kinds.join(' ') } }, m,
          s('title', null, `checkpoint at ${sn.pos}: ${sn.kinds.map((q) => q.replace('_', ' ')).join(', ') || 'unlabelled'}\n${fmtBytes(sn.bytes)}, last used ${sn.age} operations ago` + (sn.pins ? `\npinned by ${sn.pins} request(s)` : '') + (sn.evict_rank ? `\neviction order: ${sn.evict_rank}` : '')));
        g.append(mg);
      }
      focusable(g, `node ${n.id}, positions ${n.start} to ${n.end}, ${n.snapshots.length} checkpoints`, () => showDetails(n));
      bars.append(g);
    });
    // The last request's divergence and resume points, on its path.
    if (data.last && data.last.path.length) {
      const path = data.last.path;
      const at = (pos) => {
        for (let j = path.length - 1; j >= 0; j--) {
          const n = nodes[path[j]];
          if (n.start <= pos && pos <= n.end) return path[j];
        }
        return path[0];
      };
      const marker = (pos, cls, label, dy) => {
        const i = at(pos);
        const yy = y(row[i]);
        return s('g', { class: 'marker ' + cls, dataset: { pos } },
          s('line', { x1: x(pos), x2: x(pos), y1: yy - 11, y2: yy + 11 }),
          s('text', { x: x(pos) + 3, y: yy + dy, class: 'marker-label' }, label + ' ' + pos));
      };
      svg.append(marker(data.last.diverged_at, 'diverged', 'diverged', -9), marker(data.last.resumed_at, 'resumed', 'resumed', 19));
    }
    svgBox.append(svg);
    if (selected) {
      const again = nodes.find((n) => !n.aggregate && n.id === selected);
      if (again) showDetails(again);
    }
  }

  function showDetails(n) {
    selected = n.aggregate ? null : n.id;
    const row = (k, v) => h('tr', null, h('th', null, k), h('td', null, v));
    clear(details);
    if (n.aggregate) {
      details.append(h('h3', null, 'Folded branches'), h('table', null,
        row('nodes', n.subtree.nodes), row('tokens', n.subtree.tokens), row('snapshots', n.subtree.snapshots), row('bytes', fmtBytes(n.subtree.bytes)), row('pinned', n.pinned ? 'yes' : 'no')));
      return;
    }
    details.append(h('h3', null, `Node ${n.id}`), h('table', null,
      row('positions', `${n.start} \u2013 ${n.end}`),
      row('tokens', n.end - n.start),
      row('KV pages', `${n.pages} (${n.shared_pages} shared), ${fmtBytes(n.kv_bytes)}`),
      row('snapshots', n.snapshots.length),
      row('last used', `${n.age} cache operations ago`),
      row('eviction', n.pinned ? 'pinned' : n.evict_rank ? `#${n.evict_rank} in line` : 'not a leaf'),
      row('below here', `${n.subtree.nodes} nodes, ${n.subtree.tokens} tokens, ${fmtBytes(n.subtree.bytes)}`)));
    if (n.snapshots.length)
      details.append(h('table', { class: 'snaps' }, h('tr', null, h('th', null, 'pos'), h('th', null, 'kind'), h('th', null, 'bytes'), h('th', null, 'age')),
        ...n.snapshots.map((sn) => h('tr', null, h('td', null, sn.pos), h('td', null, sn.kinds.join(', ') || '-'), h('td', null, fmtBytes(sn.bytes)), h('td', null, sn.age)))));
  }

  function renderRecent() {
    if (!cache) return;
    clear(recent).append(h('h3', null, 'Recent requests'),
      h('table', { class: 'recent-table' },
        h('tr', null, ...['id', 'prompt', 'diverged at', 'resumed at', 're-run', 'hit'].map((k) => h('th', null, k))),
        ...cache.recent.slice().reverse().map((r) => h('tr', { dataset: { id: r.id || '' } },
          h('td', null, h('code', null, r.id || '#' + r.engine_id)), h('td', { class: 'num' }, r.prompt_tokens), h('td', { class: 'num' }, r.diverged_at),
          h('td', { class: 'num' }, r.resumed_at), h('td', { class: 'num' }, r.rerun_tokens), h('td', null, r.hit)))));
  }

  return {
    show() {
      refresh(true).then(schedule);
    },
    hide() {
      clearTimeout(timer);
      timer = null;
    },
    refresh: () => refresh(false),
  };
}

function niceStep(x) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(1, x))));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}
