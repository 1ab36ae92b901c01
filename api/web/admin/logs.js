// Logs view: filters (level, stream, window or since) and auto-refresh.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash, fmtClock, fmtMs } from './util.js';
import { t } from '../app/i18n/i18n.js';

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
    $('#logs-meta').textContent = t('admin.logsMeta', { n: items.length, time: fmtClock() });
  } catch (err) {
    if (err.name !== 'AbortError') showError($('#logs-error'), err);
  } finally {
    if (inflight === ctl) inflight = null;
  }
}

// detail is the hint under a message: the HTTP status and latency of a
// request, the box that wrote the entry (several boxes share one log), and
// the models that made an answer.
function detail(e) {
  const parts = [];
  if (e.status) parts.push(`HTTP ${e.status}${e.latency_ms ? `, ${fmtMs(e.latency_ms)}` : ''}`);
  if (e.node) parts.push(t('admin.onNode', { node: e.node }));
  if (e.model) parts.push(t('admin.byModel', { models: [e.model, e.speech_model].filter(Boolean).join(' + ') }));
  return parts.join(', ');
}

// The level and stream names as the filters show them.
const levelName = (l) => ({ info: t('admin.info'), warn: t('admin.warn'), error: t('admin.error') }[l] || l || '');
const streamName = (s) => ({ infer: t('admin.infer'), admin: t('admin.admin'), auth: t('admin.auth') }[s] || s || '');

function render(items) {
  const rows = items.map((e) => h('tr', { 'data-stream': e.stream_name, 'data-level': e.level },
    h('td', { 'data-label': t('admin.time'), class: 'nowrap' }, timeEl(e.timestamp)),
    h('td', { 'data-label': t('admin.level') }, h('span', { class: `badge lvl-${e.level}`, text: levelName(e.level) })),
    h('td', { 'data-label': t('admin.stream'), text: streamName(e.stream_name) }),
    // The message is replyd's own log line (English, as in its log).
    h('td', { 'data-label': t('admin.message'), class: 'wrap', lang: 'en' }, e.message || '',
      e.status || e.node ? h('span', { class: 'hint block', text: detail(e) }) : ''),
    h('td', { 'data-label': t('admin.client'), class: 'wrap', text: e.client_id == null ? '–' : e.client_id || t('admin.noClientId') }),
    h('td', { 'data-label': t('admin.resource'), class: 'mono', title: e.resource_id || '' },
      e.resource_type ? `${e.resource_type} ${shortHash(e.resource_id)}` : ''),
  ));
  if (!rows.length) rows.push(h('tr', {}, h('td', { colspan: 6, text: t('admin.noEntries') })));
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
