// Logs view: filters (level, stream, window or since) and auto-refresh.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash, fmtClock } from './util.js';

const REFRESH_MS = 5000;
let timer = 0;
let active = false;
let inflight = null;

function query() {
  const q = { limit: 200, level: $('#logs-level').value, stream: $('#logs-stream').value };
  const win = $('#logs-window').value;
  if (win === 'since') {
    const v = $('#logs-since').value;
    const d = v ? new Date(v) : null;
    if (d && !Number.isNaN(d.getTime())) q.since = d.toISOString();
  } else {
    q.window = win;
  }
  return q;
}

async function load() {
  inflight?.abort();
  const ctl = new AbortController();
  inflight = ctl;
  try {
    const r = await api('GET', '/v1/admin/logs', { query: query(), signal: ctl.signal });
    showError($('#logs-error'), null);
    const items = (r && r.items) || [];
    render(items);
    $('#logs-meta').textContent = `${items.length} ${items.length === 1 ? 'entry' : 'entries'}, updated ${fmtClock()}.`;
  } catch (err) {
    if (err.name !== 'AbortError') showError($('#logs-error'), err);
  } finally {
    if (inflight === ctl) inflight = null;
  }
}

// detail is the hint under a message: the HTTP status and latency of a
// request, and the box that wrote the entry (several boxes share one log).
function detail(e) {
  const parts = [];
  if (e.status) parts.push(`HTTP ${e.status}${e.latency_ms ? `, ${e.latency_ms} ms` : ''}`);
  if (e.node) parts.push(`on ${e.node}`);
  return parts.join(', ');
}

function render(items) {
  const rows = items.map((e) => h('tr', { 'data-stream': e.stream_name, 'data-level': e.level },
    h('td', { 'data-label': 'Time', class: 'nowrap' }, timeEl(e.timestamp)),
    h('td', { 'data-label': 'Level' }, h('span', { class: `badge lvl-${e.level}`, text: e.level })),
    h('td', { 'data-label': 'Stream', text: e.stream_name || '' }),
    h('td', { 'data-label': 'Message', class: 'wrap' }, e.message || '',
      e.status || e.node ? h('span', { class: 'hint block', text: detail(e) }) : ''),
    h('td', { 'data-label': 'Client', class: 'wrap', text: e.client_id == null ? '–' : e.client_id || '(none)' }),
    h('td', { 'data-label': 'Resource', class: 'mono', title: e.resource_id || '' },
      e.resource_type ? `${e.resource_type} ${shortHash(e.resource_id)}` : ''),
  ));
  if (!rows.length) rows.push(h('tr', {}, h('td', { colspan: 6, text: 'No entries match.' })));
  $('#logs-table tbody').replaceChildren(...rows);
}

function schedule() {
  clearInterval(timer);
  timer = 0;
  if (active && $('#logs-auto').checked) {
    timer = setInterval(() => { if (!document.hidden) load(); }, REFRESH_MS);
  }
}

export default {
  init() {
    const form = $('#logs-filter');
    form.addEventListener('submit', (ev) => { ev.preventDefault(); load(); });
    for (const id of ['#logs-level', '#logs-stream', '#logs-since']) $(id).addEventListener('change', load);
    $('#logs-window').addEventListener('change', () => {
      const since = $('#logs-window').value === 'since';
      $('#logs-since-field').hidden = !since;
      if (since && !$('#logs-since').value) {
        const d = new Date(Date.now() - 3600e3);
        d.setMinutes(d.getMinutes() - d.getTimezoneOffset());
        $('#logs-since').value = d.toISOString().slice(0, 19);
      }
      load();
    });
    $('#logs-auto').addEventListener('change', schedule);
  },
  enter() {
    active = true;
    load();
    schedule();
  },
  leave() {
    active = false;
    schedule();
    inflight?.abort();
  },
};
