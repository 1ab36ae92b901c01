// Stats view: totals, and requests and active users per interval as charts.
import { api } from './api.js';
import { $, h, showError, fmtInt, timeEl, parseTime, fmtTime } from './util.js';
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

function render() {
  if (!last) return;
  const { r, per } = last;
  $('#stats-total').textContent = fmtInt(r.total_requests);
  $('#stats-users').textContent = fmtInt(r.active_users);
  $('#stats-meta').textContent = r.since ? `Since ${fmtTime(r.since)}.` : '';
  const series = (r.series || [])
    .map((b) => ({ t: parseTime(b.start), req: b.total_requests || 0, users: b.active_users || 0, start: b.start }))
    .filter((b) => b.t)
    .sort((a, b) => a.t - b.t);
  barChart($('#chart-requests'), series.map((b) => ({ t: b.t, v: b.req })), `Requests per ${per}`);
  barChart($('#chart-users'), series.map((b) => ({ t: b.t, v: b.users })), `Active users per ${per}`);
  $('#stats-table tbody').replaceChildren(...series.map((b) => h('tr', {},
    h('td', {}, timeEl(b.start)), h('td', { class: 'num', text: b.req }), h('td', { class: 'num', text: b.users }))));
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
