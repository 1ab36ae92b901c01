// Status view: version, uptime, queue, data file, the model files, and the
// backup download.
import { api } from './api.js';
import { $, h, showError, fmtBytes, fmtDuration, fmtInt, fmtTime } from './util.js';
import signin from './signin.js';

const engineNames = { llm: 'Language model', stt: 'Speech to text', whisper: 'Speech to text' };
let ctx;

function fact(term, value) {
  return h('div', {}, h('dt', { text: term }), h('dd', {}, value));
}

function engineState(e) {
  const parts = [];
  if (e.error) parts.push(h('span', { class: 'badge bad', text: 'Error' }), ` ${e.error}`);
  else if (e.ready) parts.push(h('span', { class: 'badge ok', text: 'Loaded' }));
  else parts.push(h('span', { class: 'badge', text: 'Loading' }));
  if (e.demo) parts.push(' ', h('span', { class: 'badge warn', text: 'Demo model' }));
  // What the engine does not do as asked, such as other languages on an English-only Whisper model.
  if (e.warning) parts.push(h('span', { class: 'hint block', text: e.warning }));
  if (e.loaded_at && fmtTime(e.loaded_at)) parts.push(h('span', { class: 'hint block', text: `since ${fmtTime(e.loaded_at)}` }));
  return parts;
}

// storageState shows whether writes work and how much of the data disk is
// free; "Degraded" with the reason when the server says so.
function storageState(s) {
  const st = s.storage || {};
  const free = st.free_bytes != null ? ` ${fmtBytes(st.free_bytes)} free` : '';
  if (s.status === 'degraded') return [h('span', { class: 'badge bad', text: 'Degraded' }), ` ${st.problem || ''}`];
  return [h('span', { class: 'badge ok', text: 'OK' }), free];
}

async function load() {
  const err = $('#status-error');
  try {
    const s = await api('GET', '/v1/admin/status');
    showError(err, null);
    ctx.setDemoBanner(s.engines);
    $('#status-facts').replaceChildren(
      fact('Version', s.version || '–'),
      fact('Box', s.node || '–'),
      fact('Uptime', fmtDuration(s.uptime_seconds)),
      fact('Queue depth', fmtInt(s.queue_depth)),
      fact('Data file', fmtBytes(s.data_file_bytes)),
      fact('Storage', storageState(s)),
      fact('Code channel', s.otp_channel || '–'),
      fact('HTTPS', s.tls ? 'on' : 'off'),
      fact('M4A uploads (iOS)', s.m4a ? 'yes' : 'no: install ffmpeg'),
      fact('Web pages on other origins', (s.cors_origins || []).length ? s.cors_origins.join(', ') : 'none'),
    );
    const fp = $('#status-ca');
    fp.hidden = !s.tls_ca_fingerprint;
    $('#status-ca-fp').textContent = s.tls_ca_fingerprint || '';
    signin.render(s);
    $('#status-datafile').replaceChildren(...(s.data_file ? ['Data file: ', h('code', { class: 'mono wrap', text: s.data_file })] : []));
    const rows = (s.engines || []).map((e) => h('tr', {},
      h('th', { scope: 'row', text: engineNames[e.name] || e.name }),
      h('td', { 'data-label': 'State' }, engineState(e)),
      h('td', { 'data-label': 'Model file', class: 'mono wrap', text: e.model || '–' }),
      h('td', { 'data-label': 'Backend', text: e.backend || '–' }),
    ));
    const l = s.limits || {};
    const limits = [
      ['Audio per request', l.max_audio_seconds != null ? fmtDuration(l.max_audio_seconds) : null],
      ['Upload size', l.max_body_bytes != null ? fmtBytes(l.max_body_bytes) : null],
      ['Dialog turns', l.max_messages],
      ['Candidates', l.max_candidates != null ? `${l.default_candidates ?? '–'} by default, at most ${l.max_candidates}` : null],
      ['Inference timeout', l.infer_timeout_seconds != null ? fmtDuration(l.infer_timeout_seconds) : null],
      ['Admin session', l.session_ttl_seconds != null ? fmtDuration(l.session_ttl_seconds) : null],
    ].filter(([, v]) => v != null);
    $('#status-limits').replaceChildren(...limits.map(([k, v]) => fact(k, String(v))));
    $('#status-limits').previousElementSibling.hidden = !limits.length;
    if (!rows.length) rows.push(h('tr', {}, h('td', { colspan: 4, text: 'No engines reported.' })));
    $('#engines tbody').replaceChildren(...rows);
  } catch (e) {
    showError(err, e);
  }
}

/** Downloads GET /v1/admin/backup (it needs the admin header, so no plain link). */
async function backup() {
  const btn = $('#backup-download');
  btn.disabled = true;
  $('#backup-msg').textContent = 'Preparing the backup…';
  try {
    const res = await api('GET', '/v1/admin/backup', { raw: true });
    const blob = await res.blob();
    const name = (res.headers.get('Content-Disposition') || '').match(/filename="?([^";]+)"?/)?.[1] || 'replyd-backup.db';
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    showError($('#backup-error'), null);
    $('#backup-msg').textContent = `Downloaded ${name} (${fmtBytes(blob.size)}).`;
  } catch (e) {
    $('#backup-msg').textContent = '';
    showError($('#backup-error'), e);
  } finally {
    btn.disabled = false;
  }
}

export default {
  init(c) {
    ctx = c;
    signin.init(c);
    $('#status-refresh').addEventListener('click', load);
    $('#backup-download').addEventListener('click', backup);
  },
  enter: load,
  leave: signin.hide,
};
