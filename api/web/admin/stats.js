// Stats view: totals, requests and active users per interval, and what the
// outcome loop measures: how often a suggestion was spoken, over time, per
// system-prompt version and per key.
import { api } from './api.js';
import { $, h, showError, fmtInt, fmtRate, timeEl, parseTime, fmtTime, shortHash } from './util.js';
import { barChart } from './chart.js';

// Interval per window, and its name in words.
const buckets = { '15m': ['1m', 'minute'], '24h': ['1h', 'hour'], '7d': ['6h', '6 hours'] };
let last = null;
let active = false;

async function load() {
  const win = $('#stats-window').value;
  try {
    const r = await api('GET', '/v1/admin/stats', { query: { window: win, bucket: buckets[win][0] } });
    showError($('#stats-error'), null);
    last = { r, per: buckets[win][1] };
    render();
  } catch (err) {
    showError($('#stats-error'), err);
  }
}

const pct = (accepted, outcomes) => (outcomes ? Math.round((1000 * accepted) / outcomes) / 10 : 0);

function render() {
  if (!last) return;
  const { r, per } = last;
  $('#stats-total').textContent = fmtInt(r.total_requests);
  $('#stats-users').textContent = fmtInt(r.active_users);
  $('#stats-acceptance').textContent = fmtRate(r.acceptance_rate);
  $('#stats-keystrokes').textContent = fmtInt(r.keystrokes_saved);
  $('#stats-meta').textContent = r.since ? `Since ${fmtTime(r.since)}.` : '';
  const errors = Object.entries(r.errors || {}).map(([code, n]) => `${code} ${n}`).join(', ');
  const lat = r.latency_ms || {};
  const ttc = r.time_to_choice_ms || {};
  $('#stats-outcomes-meta').textContent = [
    `${fmtInt(r.outcomes || 0)} outcomes reported, ${fmtInt(r.accepted || 0)} spoken from a suggestion, ${fmtInt(r.none_fit || 0)} none fit.`,
    ttc.p50 != null ? `Time to choice: median ${(ttc.p50 / 1000).toFixed(1)} s, 95th percentile ${(ttc.p95 / 1000).toFixed(1)} s.` : '',
    lat.p50 != null ? `Latency: median ${fmtInt(lat.p50)} ms, 95th percentile ${fmtInt(lat.p95)} ms.` : '',
    errors ? `Errors: ${errors}.` : 'No errors.',
  ].filter(Boolean).join(' ');
  const series = (r.series || [])
    .map((b) => ({ t: parseTime(b.start), req: b.total_requests || 0, users: b.active_users || 0, outcomes: b.outcomes || 0, accepted: b.accepted || 0, start: b.start }))
    .filter((b) => b.t)
    .sort((a, b) => a.t - b.t);
  barChart($('#chart-requests'), series.map((b) => ({ t: b.t, v: b.req })), `Requests per ${per}`);
  barChart($('#chart-users'), series.map((b) => ({ t: b.t, v: b.users })), `Active users per ${per}`);
  barChart($('#chart-acceptance'), series.filter((b) => b.outcomes).map((b) => ({ t: b.t, v: pct(b.accepted, b.outcomes) })),
    `Suggestions spoken per ${per}`, { max: 100, unit: '%' });
  const versions = (r.by_prompt_version || []).filter((v) => v.outcomes);
  barChart($('#chart-versions'), versions.map((v) => ({ name: `v${v.version}`, v: pct(v.accepted, v.outcomes) })),
    'Suggestions spoken per prompt version', { max: 100, unit: '%' });
  $('#stats-table tbody').replaceChildren(...series.map((b) => h('tr', {},
    h('td', {}, timeEl(b.start)), h('td', { class: 'num', text: b.req }), h('td', { class: 'num', text: b.users }))));
  $('#stats-versions tbody').replaceChildren(...(r.by_prompt_version || []).map((v) => h('tr', { 'data-version': v.version },
    // Labelled cells: on a phone each row is a card (table.cards-sm).
    h('th', { scope: 'row', text: v.version }), h('td', { class: 'num', 'data-label': 'Inferences', text: fmtInt(v.inferences) }),
    h('td', { class: 'num', 'data-label': 'Outcomes', text: fmtInt(v.outcomes) }),
    h('td', { class: 'num', 'data-label': 'Spoken', text: fmtInt(v.accepted) }), h('td', { class: 'num', 'data-label': 'Acceptance', text: fmtRate(v.acceptance_rate) }))));
  $('#stats-ksr tbody').replaceChildren(...(r.ksr || []).map((k) => h('tr', { 'data-mode': k.steer_mode },
    h('th', { scope: 'row', text: k.steer_mode }), h('td', { 'data-label': 'Prompt version', text: k.prompt_version }),
    h('td', { class: 'num', 'data-label': 'Replies', text: fmtInt(k.replies) }), h('td', { class: 'num', 'data-label': 'Characters', text: fmtInt(k.chars) }),
    h('td', { class: 'num', 'data-label': 'Keys and selections', text: fmtInt(k.actions) }), h('td', { class: 'num', 'data-label': 'Keystroke saving', text: fmtRate(k.ksr) }))));
  $('#stats-keys tbody').replaceChildren(...(r.by_key || []).map((k) => h('tr', {},
    h('th', { scope: 'row', title: k.api_key_hash }, k.client_id || shortHash(k.api_key_hash)),
    h('td', { class: 'num', 'data-label': 'Requests', text: fmtInt(k.requests) }), h('td', { class: 'num', 'data-label': 'Errors', text: fmtInt(k.errors) }),
    h('td', { class: 'num', 'data-label': 'Outcomes', text: fmtInt(k.outcomes) }), h('td', { class: 'num', 'data-label': 'Acceptance', text: fmtRate(k.acceptance_rate) }),
    h('td', { class: 'num', 'data-label': 'Keystrokes saved', text: fmtInt(k.keystrokes_saved) }))));
}

export default {
  init() {
    $('#stats-filter').addEventListener('submit', (ev) => { ev.preventDefault(); load(); });
    $('#stats-window').addEventListener('change', load);
    let pending = 0;
    new ResizeObserver(() => {
      if (!active) return;
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(render);
    }).observe($('#chart-requests'));
  },
  enter() {
    active = true;
    load();
  },
  leave() {
    active = false;
  },
};
