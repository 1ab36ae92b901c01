// Stats view: totals, requests and active users per interval, and what the
// outcome loop measures: how often a suggestion was spoken, over time, per
// system-prompt version and per key.
import { api } from './api.js';
import { $, h, showError, fmtInt, fmtRate, timeEl, parseTime, fmtTime, shortHash, fmtSeconds, fmtMs } from './util.js';
import { t } from '../app/i18n/i18n.js';
import { barChart } from './chart.js';

// Interval per window, and its name in words.
const buckets = { '15m': ['1m', 'minute'], '24h': ['1h', 'hour'], '7d': ['6h', 'sixHours'] };
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
  $('#stats-meta').textContent = r.since ? t('admin.statsSince', { time: fmtTime(r.since) }) : '';
  const errors = Object.entries(r.errors || {}).map(([code, n]) => `${code} ${fmtInt(n)}`).join(', ');
  const lat = r.latency_ms || {};
  const ttc = r.time_to_choice_ms || {};
  $('#stats-outcomes-meta').textContent = [
    t('admin.outcomesMeta', { n: r.outcomes || 0, accepted: r.accepted || 0, noneFit: r.none_fit || 0 }),
    ttc.p50 != null ? t('admin.timeToChoice', { p50: fmtSeconds(ttc.p50 / 1000), p95: fmtSeconds(ttc.p95 / 1000) }) : '',
    lat.p50 != null ? t('admin.latency', { p50: fmtMs(lat.p50), p95: fmtMs(lat.p95) }) : '',
    errors ? t('admin.errorsList', { errors }) : t('admin.noErrors'),
  ].filter(Boolean).join(' ');
  const series = (r.series || [])
    .map((b) => ({ t: parseTime(b.start), req: b.total_requests || 0, users: b.active_users || 0, outcomes: b.outcomes || 0, accepted: b.accepted || 0, start: b.start }))
    .filter((b) => b.t)
    .sort((a, b) => a.t - b.t);
  barChart($('#chart-requests'), series.map((b) => ({ t: b.t, v: b.req })), t(`admin.requestsPer.${per}`));
  barChart($('#chart-users'), series.map((b) => ({ t: b.t, v: b.users })), t(`admin.usersPer.${per}`));
  barChart($('#chart-acceptance'), series.filter((b) => b.outcomes).map((b) => ({ t: b.t, v: pct(b.accepted, b.outcomes) })),
    t(`admin.spokenPer.${per}`), { max: 100, unit: '%' });
  const versions = (r.by_prompt_version || []).filter((v) => v.outcomes);
  barChart($('#chart-versions'), versions.map((v) => ({ name: `v${v.version}`, v: pct(v.accepted, v.outcomes) })),
    t('admin.spokenPerVersion'), { max: 100, unit: '%' });
  $('#stats-table tbody').replaceChildren(...series.map((b) => h('tr', {},
    h('td', {}, timeEl(b.start)), h('td', { class: 'num', text: fmtInt(b.req) }), h('td', { class: 'num', text: fmtInt(b.users) }))));
  $('#stats-versions tbody').replaceChildren(...(r.by_prompt_version || []).map((v) => h('tr', { 'data-version': v.version },
    // Labelled cells: on a phone each row is a card (table.cards-sm).
    h('th', { scope: 'row', text: v.version }), h('td', { class: 'num', 'data-label': t('admin.inferences'), text: fmtInt(v.inferences) }),
    h('td', { class: 'num', 'data-label': t('admin.outcomes'), text: fmtInt(v.outcomes) }),
    h('td', { class: 'num', 'data-label': t('admin.spoken'), text: fmtInt(v.accepted) }), h('td', { class: 'num', 'data-label': t('admin.acceptance'), text: fmtRate(v.acceptance_rate) }))));
  // Per language model file: what a switch of models changed.
  $('#stats-models tbody').replaceChildren(...(r.by_model || []).map((m) => h('tr', { 'data-model': m.model },
    h('th', { scope: 'row', class: 'mono', text: m.model }), h('td', { class: 'num', 'data-label': t('admin.inferences'), text: fmtInt(m.inferences) }),
    h('td', { class: 'num', 'data-label': t('admin.spoken'), text: fmtInt(m.accepted) }), h('td', { class: 'num', 'data-label': t('admin.acceptance'), text: fmtRate(m.acceptance_rate) }),
    h('td', { class: 'num', 'data-label': t('admin.medianTime'), text: m.latency_ms && m.latency_ms.p50 != null ? fmtMs(m.latency_ms.p50) : '–' }))));
  $('#stats-ksr tbody').replaceChildren(...(r.ksr || []).map((k) => h('tr', { 'data-mode': k.steer_mode },
    // The mode is the API's word (none, words, prefix, replace).
    h('th', { scope: 'row', translate: 'no', text: k.steer_mode }), h('td', { 'data-label': t('admin.promptVersion'), text: k.prompt_version }),
    h('td', { class: 'num', 'data-label': t('admin.replies'), text: fmtInt(k.replies) }), h('td', { class: 'num', 'data-label': t('admin.characters'), text: fmtInt(k.chars) }),
    h('td', { class: 'num', 'data-label': t('admin.keysAndSelections'), text: fmtInt(k.actions) }), h('td', { class: 'num', 'data-label': t('admin.keystrokeSaving'), text: fmtRate(k.ksr) }))));
  $('#stats-keys tbody').replaceChildren(...(r.by_key || []).map((k) => h('tr', {},
    h('th', { scope: 'row', title: k.api_key_hash }, k.client_id || shortHash(k.api_key_hash)),
    h('td', { class: 'num', 'data-label': t('admin.requests'), text: fmtInt(k.requests) }), h('td', { class: 'num', 'data-label': t('admin.errors'), text: fmtInt(k.errors) }),
    h('td', { class: 'num', 'data-label': t('admin.outcomes'), text: fmtInt(k.outcomes) }), h('td', { class: 'num', 'data-label': t('admin.acceptance'), text: fmtRate(k.acceptance_rate) }),
    h('td', { class: 'num', 'data-label': t('admin.keystrokesSaved'), text: fmtInt(k.keystrokes_saved) }))));
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
