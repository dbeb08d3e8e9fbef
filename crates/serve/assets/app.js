// agentctl serve console: plain ES2020, no libraries, no build step.
// Data enters the page only as text (text nodes, textContent), never as HTML.
'use strict';
(() => {
const API = '/api/v1';
const NOT_SIGNED_IN = 'Not signed in: open the link agentctl serve printed.';
const PAGE = 50, MAX_PAGE = 500, MAX_ENTRIES = 2000, FOLD_LINES = 20, FOLD_CHARS = 4000, CHART_STEPS = 200;
const STATUSES = ['all', 'queued', 'running', 'waiting', 'paused', 'interrupted', 'completed', 'failed'];
const WHY = {
  policy: 'the tool asks',
  indeterminate: 'cut off by a crash after it started: approving runs it again',
  escalation: 'run outside the sandbox once (the justification is in the arguments)',
};
let gen = 0, cleanups = [], dead = false, firstRoute = true, uid = 0, statusFilter = 'all';
// Set by an action that navigates on success: its message is about the next page, so the
// route change keeps it. Any other route change clears the status region.
let carryStatus = false;
const enc = encodeURIComponent;

// Characters that make text read as other text: controls but newline and tab, the line and
// paragraph separators, and every format character (Unicode's Cf): the bidirectional
// overrides, isolates and marks (a browser reorders text around them, so `cat <RLM> 1 > 2`
// showed as `cat 2 < 1`), zero-width spaces and joiners, the soft hyphen, tag characters
// (a key `command<ZWSP>` showed as `command`). Shown escaped, as the CLI shows them (`\r`,
// `\x1b`, `\u{202e}`); the CLI keeps the plain direction marks, which a terminal does not
// act on.
const HIDING = /[\0-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\p{Cf}]/gu;
const visible = (s) => s.replace(HIDING, (c) => {
  const n = c.codePointAt(0);
  return c === '\r' ? '\\r' : n < 0x80 ? '\\x' + n.toString(16).padStart(2, '0') : '\\u{' + n.toString(16) + '}';
});

// h('tag#id.class', {attributes}?, ...children); strings become text nodes (`visible`).
function h(sel, ...kids) {
  const [tag, ...rest] = sel.split(/(?=[.#])/), el = document.createElement(tag);
  for (const r of rest) if (r.length > 1) r[0] === '#' ? (el.id = r.slice(1)) : el.classList.add(r.slice(1));
  const a = kids[0];
  if (a && a.constructor === Object) {
    kids.shift();
    for (const k in a) {
      const v = a[k];
      if (v != null && v !== false) el.setAttribute(k, v === true ? '' : v);
    }
  }
  for (const c of kids.flat(9)) if (c != null && c !== false) el.append(c instanceof Node ? c : visible(String(c)));
  return el;
}
function tx(el, t) {
  t = t == null ? '' : visible(String(t));
  if (el.textContent !== t) el.textContent = t;
}
// The status region's message (an empty one clears it).
function say(msg, bad) {
  const el = document.getElementById('status');
  if (el) { el.className = 'status-region' + (msg ? (bad ? ' is-error' : ' is-ok') : ''); el.textContent = visible(msg); }
}
const plural = (n, w) => n + ' ' + w + (n === 1 ? '' : 's');
const shortId = (id) => (id = String(id), id.length > 14 ? id.slice(0, 8) + '…' + id.slice(-4) : id);
// The Date of a journal time, or null: a journal holds any i64, a Date up to 8.64e15 ms.
const when = (ms) => { const d = new Date(ms); return ms && !isNaN(d) ? d : null; };
const full = (ms) => { const d = when(ms); return d ? d.toLocaleString() : ''; };
const num = (n) => (typeof n === 'number' ? n.toLocaleString() : n == null ? '—' : String(n));
const chip = (t, cls) => h('span.chip.' + (cls || ''), t);
const kv = (k, v) => h('div.kv', h('span.k', k), v);
const code = (t) => h('code', t);
function ago(ms) {
  if (!ms) return '—';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000)), m = Math.floor(s / 60), hr = Math.floor(m / 60);
  return s < 5 ? 'just now' : s < 60 ? s + ' s ago' : m < 60 ? m + ' min ago' : hr < 48 ? hr + ' h ago' : Math.floor(hr / 24) + ' d ago';
}
const clock = (ms) => { const d = when(ms); return d ? d.toTimeString().slice(0, 8) : ''; };
// JSON text laid out again; its numbers as written where the browser can (a double would
// round 12345678901234567891 and turn 1e400 into null).
const exact = typeof JSON.rawJSON === 'function'
  ? (k, v, ctx) => (typeof v === 'number' && ctx && ctx.source ? JSON.rawJSON(ctx.source) : v) : undefined;
function pretty(v) {
  try { return JSON.stringify(typeof v === 'string' ? JSON.parse(v, exact) : v, null, 2); } catch (_) { return String(v); }
}
// A <pre>; past FOLD_LINES lines (or FOLD_CHARS characters) the rest folds into a <details>.
function fold(text, cls = 'out') {
  const s = text == null ? '' : String(text);
  let head = s.split('\n', FOLD_LINES).join('\n');
  if (head.length > FOLD_CHARS) head = s.slice(0, FOLD_CHARS);
  const rest = s.slice(head.length).replace(/^\n/, '');
  if (!rest) return h('pre.' + cls, s);
  return h('div.fold', h('pre.' + cls, head), h('details',
    h('summary', 'Show ' + plural(rest.replace(/\n$/, '').split('\n').length, 'more line')), h('pre.' + cls, rest)));
}
const stChip = (s) => s && chip(s.replace('_', ' '), { completed: 'ok', failed: 'bad', interrupted: 'warn', in_progress: 'run' }[s]);

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
  }
  const fail = (status, msg) => Object.assign(new Error(msg), { status });
  let res, data = null;
  try { res = await fetch(API + path, init); } catch (e) { throw fail(0, 'cannot reach agentctl serve (' + e.message + ')'); }
  if (res.status === 401) { signedOut(); throw fail(401, NOT_SIGNED_IN); }
  try { data = JSON.parse(await res.text()); } catch (_) { /* no JSON body */ }
  if (!res.ok) throw fail(res.status, (data && data.error && data.error.message) || 'HTTP ' + res.status + ' ' + res.statusText);
  return data;
}
function signedOut() {
  if (dead) return;
  dead = true;
  teardown();
  document.title = 'agentctl: not signed in';
  document.body.replaceChildren(h('main#main.signed-out', h('h1', 'agentctl'), h('p#signed-out', { role: 'alert' }, NOT_SIGNED_IN)));
}
// What a view's async callbacks check: still on that view, still signed in.
function liveness() {
  const my = gen;
  return () => my === gen && !dead;
}
const failed = (alive) => (e) => { if (alive() && e.status !== 401) say(e.message, true); };

// ---- routing: #/ runs, #/runs/ID a run, #/new submit

function teardown() {
  gen++;
  cleanups.splice(0).forEach((fn) => fn());
}
function route() {
  if (dead) return;
  teardown();
  if (!carryStatus) say('');
  carryStatus = false;
  const main = document.getElementById('main'), hash = location.hash || '#/', m = /^#\/runs\/([^/?#]+)\/?$/.exec(hash);
  main.replaceChildren();
  let cur = 'runs';
  if (hash === '#/new') { cur = 'new'; viewNew(main); } else if (m) {
    cur = '';
    let id = m[1];
    try { id = decodeURIComponent(id); } catch (_) { /* keep it raw */ }
    viewRun(main, id);
  } else viewList(main);
  for (const n of ['runs', 'new']) {
    const a = document.getElementById('nav-' + n);
    if (n === cur) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (!firstRoute) main.querySelector('h1').focus();
  firstRoute = false;
}

// ---- runs list

function viewList(main) {
  document.title = 'Runs · agentctl';
  const alive = liveness(), rows = new Map();
  const st = { limit: PAGE, head: [], tail: [], headCur: null, tailCur: null, timer: 0, chain: Promise.resolve() };
  const select = h('select#status-filter', STATUSES.map((s) => h('option', { value: s }, s)));
  select.value = statusFilter;
  const q = h('input#search-q', { type: 'search', autocomplete: 'off', placeholder: 'text in the runs\' history' });
  const searchBtn = h('button', 'Search');
  const searchForm = h('form.inline', { role: 'search' }, h('label', { for: 'search-q' }, 'Search'), q, searchBtn);
  const hits = h('section#search-hits', { 'aria-label': 'Search results', hidden: true });
  const tbody = h('tbody');
  const more = h('button#load-more', { hidden: true }, 'Load more');
  const empty = h('p.empty', { hidden: true }, 'No runs.');
  const stamp = h('p.muted.small', 'Loading…');
  main.append(h('h1', { tabindex: -1 }, 'Runs'),
    h('div.toolbar', h('div.inline', h('label', { for: 'status-filter' }, 'Status'), select), searchForm), hits,
    h('div.table-wrap', h('table#runs', h('caption.sr-only', 'Runs, newest first'),
      h('thead', h('tr', ['Run', 'Status', 'Title', 'Model', 'Steps', 'Tokens', 'Worker', 'Last activity']
        .map((c) => h('th', { scope: 'col', class: /^(Steps|Tokens)$/.test(c) && 'num' }, c)))), tbody)),
    empty, h('div.below', more, stamp));

  // One request at a time: the refresh loop and "Load more" queue behind each other.
  const queue = (fn) => (st.chain = st.chain.then(() => alive() && fn()).catch((e) => console.error(e)));
  const query = (limit, cursor) => {
    const p = new URLSearchParams({ limit });
    if (statusFilter !== 'all') p.set('status', statusFilter);
    if (cursor) p.set('cursor', cursor);
    return '/runs?' + p;
  };
  async function refresh() {
    const f = statusFilter;
    try {
      const d = await api('GET', query(st.limit));
      if (!alive() || f !== statusFilter) return;
      st.head = d.runs || [];
      st.headCur = d.next_cursor;
      render();
      tx(stamp, 'Updated ' + clock(Date.now()) + ', every 2 s');
    } catch (e) { if (alive() && e.status !== 401) tx(stamp, 'Could not refresh: ' + e.message); }
  }
  async function loadMore() {
    const cursor = st.tail.length ? st.tailCur : st.headCur, f = statusFilter;
    if (!cursor) return;
    more.disabled = true;
    try {
      const d = await api('GET', query(PAGE, cursor)), runs = d.runs || [];
      if (!alive() || f !== statusFilter) return;
      // Pages within one refresh's reach get refreshed; later ones stay as loaded.
      if (!st.tail.length && st.limit + PAGE <= MAX_PAGE) { st.limit += PAGE; st.head = st.head.concat(runs); st.headCur = d.next_cursor; }
      else { st.tail = st.tail.concat(runs); st.tailCur = d.next_cursor; }
      render();
      say('loaded ' + plural(runs.length, 'more run'));
    } catch (e) { failed(alive)(e); } finally { more.disabled = false; }
  }
  function makeRow(id) {
    const c = {
      word: h('span.status-word'), badge: h('span.badge-waiting', 'waiting for you'), status: h('td.status'),
      title: h('td.title'), model: h('td'), steps: h('td.num'), tokens: h('td.num'), worker: h('td'), act: h('td.nowrap'),
    };
    c.status.append(c.word);
    const tr = h('tr', { 'data-run-id': id }, h('td.id', h('a', { href: '#/runs/' + enc(id), title: id }, shortId(id))),
      c.status, c.title, c.model, c.steps, c.tokens, c.worker, c.act);
    tr.cells_ = c;
    return tr;
  }
  function fill(tr, r) {
    const c = tr.cells_, n = Number(r.pending_approvals) || 0, at = r.updated_at || r.created_at;
    tx(c.word, r.status);
    c.word.className = 'status-word st st-' + r.status;
    if (n > 0) {
      if (!c.badge.parentNode) c.status.append(' ', c.badge);
      c.badge.title = plural(n, 'call') + ' waiting for your decision';
    } else if (c.badge.parentNode) c.status.replaceChildren(c.word);
    tx(c.title, r.title); tx(c.model, r.model || '—'); tx(c.steps, num(r.steps)); tx(c.tokens, num(r.tokens));
    tx(c.worker, r.worker || '—'); tx(c.act, ago(at)); c.act.title = full(at);
  }
  // Rows are updated in place, so focus and scroll survive the refresh.
  function render() {
    const seen = new Set(), list = [];
    for (const r of st.head.concat(st.tail)) if (r && !seen.has(r.run_id)) { seen.add(r.run_id); list.push(r); }
    for (const [id, tr] of rows) if (!seen.has(id)) { tr.remove(); rows.delete(id); }
    list.forEach((r, i) => {
      let tr = rows.get(r.run_id);
      if (!tr) rows.set(r.run_id, (tr = makeRow(r.run_id)));
      fill(tr, r);
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
    empty.hidden = list.length > 0;
    more.hidden = !(st.tail.length ? st.tailCur : st.headCur);
  }
  const tick = () => queue(refresh).then(() => { if (alive()) st.timer = setTimeout(tick, 2000); });
  select.addEventListener('change', () => {
    statusFilter = select.value;
    Object.assign(st, { limit: PAGE, head: [], tail: [], headCur: null, tailCur: null });
    render();
    tx(stamp, 'Loading…');
    queue(refresh);
  });
  more.addEventListener('click', () => queue(loadMore));
  searchForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const term = q.value.trim();
    hits.hidden = !term;
    if (!term) return hits.replaceChildren();
    searchBtn.disabled = true;
    try {
      const found = (await api('GET', '/search?' + new URLSearchParams({ q: term }))).hits || [];
      if (!alive()) return;
      hits.replaceChildren(h('h2', 'Search ', h('q', term), ': ' + plural(found.length, 'hit')),
        found.length ? h('ol.hits', found.map((x) => h('li',
          h('a', { href: '#/runs/' + enc(x.run_id), title: x.run_id }, shortId(x.run_id)), ' ', x.kind && chip(x.kind),
          x.tool && chip(x.tool), h('div.snippet', x.snippet)))) : h('p.empty', 'No hits.'));
      say(plural(found.length, 'hit') + ' for ' + term);
    } catch (e) { failed(alive)(e); } finally { searchBtn.disabled = false; }
  });
  cleanups.push(() => clearTimeout(st.timer));
  tick();
}

// ---- one run

function viewRun(main, id) {
  document.title = 'Run ' + visible(shortId(id)) + ' · agentctl';
  const alive = liveness(), path = '/runs/' + enc(id), f = {};
  const label = (forId, t) => h('label', { for: forId }, t);

  const statusEl = h('span#run-status.st', '…');
  const badge = h('span.badge-waiting', { hidden: true }, 'waiting for you');
  const detail = h('span.muted'), title = h('p.run-title'), note = h('p.muted.small');
  const stream = h('span#stream-state.stream', 'connecting…');
  const fact = (k, name, wide) => h(wide ? 'div.wide' : 'div', h('dt', name), (f[k] = h('dd#run-' + k, '—')));

  const apprEmpty = h('p.empty', 'Nothing waits for a decision.');
  const apprBox = h('div#approvals', apprEmpty);
  const apprH = h('h2#approvals-h', { tabindex: -1 }, 'Pending approvals');
  const apprSection = h('section.panel.approvals-panel', { 'aria-labelledby': 'approvals-h' }, apprH, apprBox);
  const approvals = new Map(); // call_id -> {div, sha}

  const kids = h('ul#children.children');
  const kidsSection = h('section#children-panel.panel', { hidden: true, 'aria-labelledby': 'children-h' },
    h('h2#children-h', 'Sub-agents'), kids);
  const children = new Map(); // run_id -> {li, word, badge, title}

  const steerText = h('textarea#steer-text', { rows: 3, required: true, placeholder: 'e.g. use the staging database' });
  const steerSend = h('button#steer-send', 'Send steer');
  const steerForm = h('form', label('steer-text', 'Steer: a message for the model\'s next step'), steerText, h('div.buttons', steerSend));
  const interrupt = h('button#interrupt.danger', 'Interrupt');
  const numIn = (i) => h('input#' + i, { type: 'number', min: 1, step: 1 });
  const rSteps = numIn('resume-steps'), rTokens = numIn('resume-tokens');
  const resumeSend = h('button#resume-send', 'Resume');
  const resumeForm = h('form', h('fieldset', h('legend', 'Resume a paused or interrupted run'),
    h('div.grid2', h('div', label('resume-steps', 'Max steps'), rSteps), h('div', label('resume-tokens', 'Max tokens'), rTokens)),
    h('div.buttons', resumeSend)));

  const chartBox = h('div.chart-box'), chartNote = h('figcaption.muted.small');
  const chart = h('figure#token-chart', { hidden: true }, h('figcaption', 'Tokens per step'), chartBox, chartNote);
  const timeline = h('ol#timeline', { tabindex: 0, 'aria-labelledby': 'timeline-h' });
  const dropped = h('p#timeline-dropped.muted.small', { hidden: true });
  const tlEmpty = h('p.empty', 'No events yet.');

  main.append(
    h('section.run-head', { 'aria-labelledby': 'run-h1' }, h('h1#run-h1', { tabindex: -1 }, 'Run ', code(id)), title,
      h('dl.facts', h('div', h('dt', 'Status'), h('dd', statusEl, ' ', badge, ' ', detail)),
        fact('model', 'Model'), fact('workspace', 'Workspace', 1), fact('sandbox', 'Sandbox'), fact('steps', 'Steps'),
        fact('tokens', 'Tokens', 1), h('div', h('dt', 'Events'), h('dd', stream))), note, chart),
    apprSection,
    kidsSection,
    h('div.run-grid',
      h('section.timeline-panel', { 'aria-labelledby': 'timeline-h' },
        h('h2#timeline-h', 'Timeline'),
        dropped, tlEmpty, timeline),
      h('section.panel.actions', { 'aria-labelledby': 'actions-h' }, h('h2#actions-h', 'Steer and control'),
        steerForm, h('div.buttons', interrupt, h('span.muted.small', 'stops the run at once')), resumeForm)));

  // ---- header: after event batches, at most once a second; every 5 s when idle
  const hr = { timer: 0, idle: 0, busy: false, again: false, last: 0, gone: false };
  function refreshSoon() {
    if (!alive() || hr.gone) return;
    clearTimeout(hr.idle);
    if (hr.busy) hr.again = true;
    else if (!hr.timer) hr.timer = setTimeout(loadRun, Math.max(0, hr.last + 1000 - Date.now()));
  }
  async function loadRun() {
    hr.timer = 0; hr.busy = true; hr.last = Date.now();
    try {
      const run = await api('GET', path);
      if (alive()) { renderHead(run); tx(note, ''); }
    } catch (e) {
      if (!alive() || e.status === 401) return;
      tx(note, (e.status === 404 ? '' : 'Could not refresh: ') + e.message);
      if (e.status === 404) { hr.gone = true; closeStream(); streamState('closed', 'bad'); }
    } finally {
      hr.busy = false;
      if (hr.again) { hr.again = false; refreshSoon(); } else if (alive() && !hr.gone) hr.idle = setTimeout(refreshSoon, 5000);
    }
  }
  function renderHead(run) {
    const pending = run.pending_approvals || [], sb = run.sandbox, u = run.usage;
    tx(statusEl, run.status);
    statusEl.className = 'st st-' + run.status;
    badge.hidden = !pending.length;
    tx(detail, run.detail && '(' + run.detail + ')');
    tx(title, run.title);
    tx(f.model, run.model || '—');
    tx(f.workspace, run.workspace || '—');
    tx(f.sandbox, sb && sb.mode ? sb.mode + (sb.network ? ', network on' : ', no network') : '—');
    tx(f.steps, num(run.steps));
    tx(f.tokens, num(run.tokens) + (u ? ' (in ' + num(u.input_tokens) + ', out ' + num(u.output_tokens) + ')' : ''));
    renderApprovals(pending);
    renderChildren(run.children || []);
  }
  // One line per child run (spawn_agents), in the call's order, updated in place.
  function renderChildren(list) {
    const seen = new Set();
    for (const k of list) {
      seen.add(k.run_id);
      let c = children.get(k.run_id);
      if (!c) {
        c = { word: h('span.st'), title: h('span.child-title'),
          badge: h('span.badge-waiting', { hidden: true }, 'waiting for you') };
        const link = h('a', { href: '#/runs/' + enc(k.run_id), title: k.run_id }, shortId(k.run_id));
        c.li = h('li', { 'data-run-id': k.run_id }, link, ' ', c.word, ' ', c.badge, ' ', c.title);
        children.set(k.run_id, c);
      }
      tx(c.word, k.status);
      c.word.className = 'st st-' + k.status;
      c.badge.hidden = !(k.pending_approvals || []).length;
      tx(c.title, k.title || '');
      kids.append(c.li); // appending an existing node moves it: the list keeps the call's order
    }
    for (const [rid, c] of children) if (!seen.has(rid)) { c.li.remove(); children.delete(rid); }
    kidsSection.hidden = children.size === 0;
  }
  // Updated in place (keyed by call id): a reason being typed survives refreshes.
  function renderApprovals(list) {
    const seen = new Set();
    let lost = false;
    for (const p of list) {
      seen.add(p.call_id);
      const cur = approvals.get(p.call_id);
      if (cur && cur.sha === p.args_sha256 && cur.round === p.round) continue;
      const div = makeApproval(p);
      if (cur) cur.div.replaceWith(div); else apprBox.append(div);
      approvals.set(p.call_id, { div, sha: p.args_sha256, round: p.round });
    }
    for (const [cid, cur] of approvals) {
      if (seen.has(cid)) continue;
      lost = lost || cur.div.contains(document.activeElement);
      cur.div.remove();
      approvals.delete(cid);
    }
    apprEmpty.hidden = approvals.size > 0;
    apprSection.classList.toggle('has-pending', approvals.size > 0);
    if (lost) (apprBox.querySelector('.approval-reason') || apprH).focus();
  }
  function makeApproval(p) {
    const n = ++uid, rid = 'approval-reason-' + n;
    const reason = h('input.approval-reason#' + rid, { type: 'text', autocomplete: 'off' });
    const yes = h('button.approve', 'Approve');
    const no = h('button.deny', 'Deny');
    const decide = async (decision) => {
      yes.disabled = no.disabled = true;
      try {
        await api('POST', path + '/approvals/' + enc(p.call_id), { decision, sha256: p.args_sha256, round: p.round, reason: reason.value.trim() || null });
        if (alive()) say(decision === 'approve' ? 'approved' : 'denied');
      } catch (e) { failed(alive)(e); } finally { yes.disabled = no.disabled = false; refreshSoon(); }
    };
    yes.addEventListener('click', () => decide('approve'));
    no.addEventListener('click', () => decide('deny'));
    return h('div.approval', { 'data-call-id': p.call_id, role: 'group', 'aria-labelledby': 'approval-h-' + n },
      h('h3#approval-h-' + n, 'Tool ', code(p.tool), ', call ', code(p.call_id)),
      h('p', 'Why: ', h('strong', p.reason), WHY[p.reason] ? ': ' + WHY[p.reason] : ''),
      // As the tool reads them: JSON text can say one thing at its top and another below
      // the fold (a key given twice: the last one runs), which the reading does not.
      h('p.k', 'Arguments, exactly what will run:'), h('pre.args', pretty(p.arguments)),
      h('details', h('summary', 'As the model wrote them (args_sha256 is of this text)'), h('pre.raw', p.arguments)),
      h('p.sha', 'args_sha256 ', code(p.args_sha256)),
      h('div.decide', label(rid, 'Reason (optional)'), reason, yes, no));
  }

  // ---- actions: the answer or error.message goes to the status region
  async function act(btn, sub, body, ok) {
    btn.disabled = true;
    try {
      const r = await api('POST', path + sub, body);
      if (alive()) say(ok(r || {}));
      return true;
    } catch (e) { failed(alive)(e); } finally { btn.disabled = false; refreshSoon(); }
  }
  steerForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (await act(steerSend, '/steer', { text: steerText.value },
      (r) => 'steer sent (' + r.steer_id + '); its fate appears in the timeline')) steerText.value = '';
  });
  interrupt.addEventListener('click', () => act(interrupt, '/interrupt', undefined, () => 'interrupt requested'));
  resumeForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const val = (i) => (i.value.trim() ? Number(i.value) : null);
    act(resumeSend, '/resume', { max_steps: val(rSteps), max_tokens: val(rTokens) }, () => 'resumed: the run is claimable again');
  });

  // ---- timeline
  const tl = {
    queue: [], timer: 0, seq: 0, dropped: 0,
    items: new Map(), // item id -> its <li>
    steps: [], // step -> tokens (input + output), from model.completed
  };
  // Events that give no --json line but a detail worth a timeline entry.
  const DETAIL_KINDS = new Set(['run.resumed', 'run.requeued', 'run.sandbox_changed']);
  function onEvent(e) {
    let ev;
    try { ev = JSON.parse(e.data); } catch (_) { return; }
    if (!alive() || !ev || !(ev.seq > tl.seq)) return;
    tl.seq = ev.seq;
    tl.queue.push(ev);
    if (!tl.timer) tl.timer = setTimeout(flush, 50);
  }
  function flush() {
    tl.timer = 0;
    if (!alive()) return;
    // Follow new entries while scrolled to the end of the timeline.
    const stick = timeline.scrollTop + timeline.clientHeight >= timeline.scrollHeight - 30;
    const batch = [], at = new Map(), updates = new Map();
    let stepsChanged = false;
    for (const ev of tl.queue.splice(0)) {
      const lines = (ev.lines || []).slice();
      if (ev.detail && DETAIL_KINDS.has(ev.kind)) lines.push(Object.assign({ type: ev.kind }, ev.detail));
      if (ev.kind === 'model.completed' && ev.detail && ev.detail.usage) {
        const u = ev.detail.usage;
        tl.steps[ev.detail.step] = (u.input_tokens || 0) + (u.output_tokens || 0);
        stepsChanged = true;
      }
      for (const line of lines) {
        if (!line) continue;
        const key = /^item\./.test(line.type) && line.item ? itemKey(line.item) : null;
        // item.completed replaces the entry of the same item's item.started.
        if (key !== null && at.has(key)) batch[at.get(key)] = [ev, line];
        else if (key !== null && tl.items.has(key)) updates.set(key, [ev, line]);
        else {
          if (key !== null) at.set(key, batch.length);
          batch.push([ev, line]);
        }
      }
    }
    for (const [key, [ev, line]] of updates) {
      const li = entry(ev, line);
      tl.items.get(key).replaceWith(li);
      tl.items.set(key, li);
    }
    // Build only what is kept: a long replay must not create nodes to drop them.
    const start = Math.max(0, batch.length - MAX_ENTRIES), frag = document.createDocumentFragment();
    tl.dropped += start;
    for (const [ev, line] of batch.slice(start)) {
      const li = entry(ev, line);
      if (li.dataset.itemKey != null) tl.items.set(li.dataset.itemKey, li);
      frag.append(li);
    }
    timeline.append(frag);
    let count = timeline.childElementCount;
    for (; count > MAX_ENTRIES; count--, tl.dropped++) {
      const li = timeline.firstElementChild, k = li.dataset.itemKey;
      if (tl.items.get(k) === li) tl.items.delete(k);
      li.remove();
    }
    dropped.hidden = !tl.dropped;
    tx(dropped, num(tl.dropped) + ' earlier events not shown');
    tlEmpty.hidden = count > 0;
    if (stick) timeline.scrollTop = timeline.scrollHeight;
    if (stepsChanged) drawChart();
    refreshSoon();
  }
  // Tokens per step: one bar per step (the last CHART_STEPS), scaled to the largest.
  function drawChart() {
    const NS = 'http://www.w3.org/2000/svg', W = 600, H = 80;
    const all = tl.steps.map((t, i) => [i, t]).filter((x) => x[1] != null);
    const shown = all.slice(-CHART_STEPS);
    chart.hidden = !shown.length;
    if (!shown.length) return;
    const max = Math.max(1, ...shown.map((x) => x[1])), bw = W / Math.max(shown.length, 10);
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', 'Tokens per step: ' + all.length + ' steps, the largest ' + num(max));
    shown.forEach(([step, t], i) => {
      const r = document.createElementNS(NS, 'rect'), bh = Math.max(1, (t / max) * (H - 2));
      r.setAttribute('x', String(i * bw + 1));
      r.setAttribute('y', String(H - bh));
      r.setAttribute('width', String(Math.max(1, bw - 2)));
      r.setAttribute('height', String(bh));
      const tip = document.createElementNS(NS, 'title');
      tip.textContent = 'step ' + step + ': ' + num(t) + ' tokens';
      r.append(tip);
      svg.append(r);
    });
    chartBox.replaceChildren(svg);
    tx(chartNote, all.length > CHART_STEPS ? 'the last ' + CHART_STEPS + ' of ' + all.length + ' steps' : all.length + ' step(s)');
  }
  // A message's or reasoning's id is the stream's own (`item_N`), a call's is the model's
  // call_id: two namespaces, so a call named `item_3` never takes the place of message 3.
  function itemKey(it) {
    return (it.type === 'agent_message' || it.type === 'reasoning' ? 'm:' : 'c:') + it.id;
  }
  function entry(ev, l) {
    const attrs = { 'data-kind': l.type }, it = /^item\./.test(l.type) && l.item, t = when(ev.at);
    if (it) {
      attrs['data-kind'] = 'item:' + it.type; attrs['data-item-id'] = it.id; attrs['data-item-key'] = itemKey(it);
    }
    const [name, cls, chips, parts] = it ? itemParts(it) : lineParts(l), body = parts.filter(Boolean);
    return h('li.ev.' + cls, attrs,
      h('div.ev-head', h('time', { datetime: t && t.toISOString(), title: full(ev.at) }, clock(ev.at)),
        h('span.ev-label', name), chips),
      body.length ? h('div.ev-body', body) : null);
  }
  // -> [label, class, chips, body]
  function itemParts(it) {
    const s = stChip(it.status), args = (a) => kv('arguments', fold(pretty(a), 'args'));
    switch (it.type) {
      case 'agent_message': return ['Agent', 'msg', [], [h('div.text', it.text)]];
      case 'reasoning': return ['Reasoning', 'reasoning', [], [h('div.text', it.text || '(no summary)')]];
      case 'command_execution':
        return ['shell', 'tool', [s, it.exit_code != null && chip('exit ' + it.exit_code, it.exit_code ? 'bad' : 'ok'),
          chip(it.sandbox ? 'sandbox: ' + it.sandbox : 'no sandbox', it.sandbox === 'escalated' && 'warn')],
        [h('pre.cmd', '$ ' + (it.command || '')), it.aggregated_output && fold(it.aggregated_output)]];
      case 'file_change':
        return ['write_file', 'tool', [s], [(it.changes || []).map((c) => h('div', code(c.path), ' ', chip(c.kind))),
          it.output && fold(it.output)]];
      case 'mcp_tool_call': {
        const res = it.result && (it.result.content || []).map((c) => c.text).join('\n');
        return ['MCP ' + it.server + ' · ' + it.tool, 'tool', [s], [args(it.arguments), res != null && kv('result', fold(res)),
          it.error && h('p.error-text', 'Error: ' + it.error.message)]];
      }
      case 'tool_call':
        return [it.name || 'tool', 'tool', [s, it.event && chip(it.event)],
          [it.arguments != null && args(it.arguments), it.output != null && kv('output', fold(it.output))]];
      case 'error': return ['Refused', 'bad', [chip('call ' + it.id)], [h('p.error-text', it.message)]];
      default: return [it.type, '', [s], [fold(pretty(it), 'args')]];
    }
  }
  function lineParts(l) {
    const p = (...k) => h('p', k);
    switch (l.type) {
      case 'thread.started': return ['Run started', 'quiet', [], []];
      case 'turn.started': return ['Drive started', 'quiet', [], []];
      case 'turn.completed': {
        const u = l.usage || {};
        return ['Completed', 'ok', [chip('tokens: in ' + num(u.input_tokens) + ' (cached ' + num(u.cached_input_tokens) + '), out ' +
          num(u.output_tokens) + ' (reasoning ' + num(u.reasoning_output_tokens) + ')')], []];
      }
      case 'turn.failed': return ['Failed', 'bad', [], [h('p.error-text', l.error && l.error.message)]];
      case 'error': return ['Model error', 'bad', [], [h('p.error-text', l.message)]];
      case 'approval.requested':
        return ['Approval requested', 'warn', [chip(l.reason, l.reason !== 'policy' && 'warn')], [
          p('Tool ', code(l.tool), ', call ', code(l.call_id), WHY[l.reason] ? ': ' + WHY[l.reason] : ''),
          h('p.sha', 'args_sha256 ', code(l.args_sha256)), kv('arguments', fold(pretty(l.arguments), 'args'))]];
      case 'approval.decided': {
        const yes = l.decision === 'approve';
        return [yes ? 'Approved' : 'Denied', yes ? 'ok' : 'bad', [chip('call ' + l.call_id)], [p('by ' + (l.by || 'unknown') + (l.reason ? ': ' + l.reason : ''))]];
      }
      case 'run.paused': return ['Paused', 'warn', [chip(l.reason, 'warn')], [l.detail && p(l.detail)]];
      case 'steer.requested':
        return ['Steer', 'steer', [chip(l.id)], [h('div.text', l.text)]];
      case 'steer.applied':
        return ['Steer applied', 'steer', [chip(l.id), chip('at step ' + l.step, 'ok'), l.via && chip('via ' + l.via)], []];
      case 'steer.dropped': return ['Steer dropped', 'bad', [chip(l.id)], [p(l.reason)]];
      case 'context.compacted':
        return ['Context compacted', 'quiet', [chip(num(l.items_replaced) + ' items replaced before step ' + l.step)], []];
      case 'interrupt.requested': return ['Interrupt requested', 'warn', [], []];
      case 'run.resumed': {
        const o = l.owner || {};
        return ['Taken over', 'quiet', [l.epoch != null && chip('epoch ' + l.epoch), o.host && chip(o.host + ':' + o.pid)],
          [l.budgets && p('budgets: ' + num(l.budgets.max_steps) + ' steps' + (l.budgets.max_tokens ? ', ' + num(l.budgets.max_tokens) + ' tokens' : ''))]];
      }
      case 'run.requeued':
        return ['Offered to workers again', 'quiet', [l.by && chip('by ' + l.by)],
          [l.budgets && p('budgets: ' + num(l.budgets.max_steps) + ' steps' + (l.budgets.max_tokens ? ', ' + num(l.budgets.max_tokens) + ' tokens' : ''))]];
      case 'run.sandbox_changed': {
        const sb = l.sandbox || {};
        return ['Sandbox changed', sb.mode === 'off' ? 'warn' : 'quiet', [chip(l.from + ' → ' + sb.mode), chip(l.cause)],
          [sb.fallback && p(sb.fallback)]];
      }
      case 'run.interrupted': return ['Interrupted', 'warn', [], [p('Cancelled: ' + ((l.cancelled || []).join(', ') || 'no call'))]];
      default: return [l.type, '', [], [fold(pretty(l), 'args')]];
    }
  }

  // ---- event stream (EventSource reconnects by itself with Last-Event-ID)
  let es = null, retry = 0, delay = 2000;
  const streamState = (t, cls) => { tx(stream, t); stream.className = 'stream ' + cls; };
  function closeStream() {
    if (es) es.close();
    es = null;
    clearTimeout(retry);
  }
  function connect() {
    if (!alive() || hr.gone) return;
    const src = (es = new EventSource(API + path + '/events/stream' + (tl.seq ? '?after=' + tl.seq : '')));
    src.addEventListener('open', () => { delay = 2000; streamState('live', 'ok'); });
    src.addEventListener('run_event', onEvent);
    src.addEventListener('error', (e) => {
      if (!alive() || es !== src) return;
      if (e.data) {
        let m = e.data;
        try { m = JSON.parse(m).message; } catch (_) { /* plain text */ }
        return streamState('stream error: ' + m, 'bad');
      }
      streamState('reconnecting…', 'warn');
      if (src.readyState === EventSource.CLOSED) {
        // Refused (401, 404, 429): EventSource gives up; retry (the header refresh finds 401/404).
        closeStream();
        refreshSoon();
        retry = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      }
    });
  }
  cleanups.push(() => { closeStream(); clearTimeout(tl.timer); clearTimeout(hr.timer); clearTimeout(hr.idle); });
  refreshSoon();
  connect();
}

// ---- submit a run

function viewNew(main) {
  document.title = 'New run · agentctl';
  const alive = liveness();
  const sel = (id, opts) => h('select#' + id, opts.map((v) => h('option', { value: v }, v)));
  const prompt = h('textarea#new-prompt', { rows: 6, required: true });
  const ws = h('input#new-workspace', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false',
    placeholder: 'an absolute path on the workers\' machine' });
  const model = h('input#new-model', { type: 'text', autocomplete: 'off', placeholder: 'the server\'s default' });
  const steps = h('input#new-max-steps', { type: 'number', min: 1, step: 1 });
  const approval = sel('new-approval', ['default', 'ask', 'auto', 'deny']);
  const sandbox = sel('new-sandbox', ['workspace-write', 'read-only', 'off']);
  const submit = h('button#new-submit', 'Submit run');
  const row = (name, el) => h('div.form-row', h('label', { for: el.id }, name), el);
  const form = h('form#new-run', row('Prompt (required)', prompt),
    row('Workspace (required)', ws),
    h('div.grid2', row('Model', model), row('Max steps', steps), row('Approval', approval), row('Sandbox', sandbox)),
    h('div.buttons', submit));
  main.append(h('h1', { tabindex: -1 }, 'New run'), form);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = { prompt: prompt.value, workspace: ws.value.trim(), approval: approval.value, sandbox: sandbox.value };
    if (model.value.trim()) body.model = model.value.trim();
    if (steps.value) body.max_steps = Number(steps.value);
    submit.disabled = true;
    try {
      const r = await api('POST', '/runs', body);
      if (!alive()) return;
      say('submitted run ' + r.run_id);
      carryStatus = true;
      location.hash = '#/runs/' + enc(r.run_id);
    } catch (err) { failed(alive)(err); } finally { submit.disabled = false; }
  });
}

window.addEventListener('hashchange', route);
route();
})();
