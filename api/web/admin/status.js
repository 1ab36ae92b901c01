// Status view: version, uptime, queue, data file, the model files, and the
// backup download.
import { api } from './api.js';
import { $, h, showError, fmtBytes, fmtDuration, fmtInt, fmtTime } from './util.js';
import { t } from '../app/i18n/i18n.js';
import signin from './signin.js';

const engineNames = { llm: 'admin.engineLlm', stt: 'admin.engineStt', whisper: 'admin.engineStt' };
let ctx;

function fact(term, value) {
  return h('div', {}, h('dt', { text: term }), h('dd', {}, value));
}

function engineState(e) {
  const parts = [];
  // The error is replyd's own text (English, as in its log).
  if (e.error) parts.push(h('span', { class: 'badge bad', text: t('admin.engineError') }), ' ', h('span', { lang: 'en', text: e.error }));
  else if (e.ready) parts.push(h('span', { class: 'badge ok', text: t('admin.loaded') }));
  else parts.push(h('span', { class: 'badge', text: t('admin.loading') }));
  if (e.demo) parts.push(' ', h('span', { class: 'badge warn', text: t('admin.demoModel') }));
  // An English-only Whisper model asked for other languages keeps
  // transcribing English (the server's warning, in the page's language).
  if (e.english_only && e.non_english_requests > 0) parts.push(h('span', { class: 'hint block', text: t('admin.englishOnlyWarning', { n: e.non_english_requests }) }));
  // Speech-to-text's encoder window (REPLYD_WHISPER_WINDOW): the rule is
  // replyd's own text (English), the counts since start.
  if (e.window) parts.push(h('span', { class: 'hint block' }, t('admin.sttWindow', { n: fmtInt(e.window_shortened || 0), r: fmtInt(e.window_retries || 0) }), ' ', h('span', { lang: 'en', text: e.window })));
  if (e.loaded_at && fmtTime(e.loaded_at)) parts.push(h('span', { class: 'hint block', text: t('admin.sinceTime', { time: fmtTime(e.loaded_at) }) }));
  return parts;
}

// storageState shows whether writes work and how much of the data disk is
// free; "Degraded" with the reason when the server says so.
function storageState(s) {
  const st = s.storage || {};
  const free = st.free_bytes != null ? ` ${t('admin.bytesFree', { size: fmtBytes(st.free_bytes) })}` : '';
  if (s.status === 'degraded') return [h('span', { class: 'badge bad', text: t('admin.degraded') }), ' ', h('span', { lang: 'en', text: st.problem || '' })];
  return [h('span', { class: 'badge ok', text: t('admin.storageOk') }), free];
}

// liveState is live listening on this box (REPLYD_LIVE); each key has its
// own switch in the keys view.
function liveState(live) {
  if (live === 'on') return h('span', { class: 'badge ok', text: t('admin.on') });
  if (live === 'off') return [h('span', { class: 'badge', text: t('admin.off') }), ' ', h('code', { translate: 'no', text: 'REPLYD_LIVE=off' })];
  if (live === 'no_vad') return h('span', { class: 'badge warn', text: t('admin.liveNoVad') });
  return '–';
}

// cpuState is the cores replyd plans with and where that figure comes
// from (affinity mask, cgroup quota, REPLYD_CPU_CORES).
function cpuState(c) {
  if (!c) return '–';
  return [fmtInt(c.cores), ' ', h('code', { translate: 'no', text: `(${c.source})` })];
}

// kernelsState names the kernels of both engines: OpenBLAS's core for
// speech (and whether replyd corrected a fallback or the admin set it),
// ggml's CPU features for the language model.
function kernelsState(k) {
  if (!k) return '–';
  const note = k.openblas_corrected_from ? ` (${t('admin.kernelsCorrectedFrom', { core: k.openblas_corrected_from })})`
    : k.openblas_source === 'admin' ? ` (${t('admin.kernelsAdminSet')})` : '';
  return [h('code', { translate: 'no', text: `OpenBLAS ${k.openblas_core}` }), note, h('span', { class: 'hint block', translate: 'no', text: `ggml: ${k.ggml_cpu || '–'}` })];
}

async function load() {
  const err = $('#status-error');
  try {
    const s = await api('GET', '/v1/admin/status');
    showError(err, null);
    ctx.setDemoBanner(s.engines);
    $('#status-facts').replaceChildren(
      fact(t('admin.version'), s.version || '–'),
      fact(t('admin.box'), s.node || '–'),
      fact(t('admin.uptime'), fmtDuration(s.uptime_seconds)),
      fact(t('admin.queueDepth'), fmtInt(s.queue_depth)),
      fact(t('admin.dataFile'), fmtBytes(s.data_file_bytes)),
      fact(t('admin.storage'), storageState(s)),
      fact(t('admin.codeChannel'), s.otp_channel || '–'),
      fact('HTTPS', s.tls ? t('admin.on') : t('admin.off')),
      fact(t('admin.m4aUploads'), s.m4a ? t('admin.yes') : t('admin.noFfmpeg')),
      fact(t('admin.corsOrigins'), (s.cors_origins || []).length ? s.cors_origins.join(', ') : t('admin.noneValue')),
      fact(t('admin.liveListening'), liveState(s.live)),
      fact(t('admin.cpuCores'), cpuState(s.cpu)),
      fact(t('admin.kernels'), kernelsState(s.kernels)),
    );
    const fp = $('#status-ca');
    fp.hidden = !s.tls_ca_fingerprint;
    $('#status-ca-fp').textContent = s.tls_ca_fingerprint || '';
    signin.render(s);
    $('#status-datafile').replaceChildren(...(s.data_file ? [t('admin.dataFileAt'), ' ', h('code', { class: 'mono wrap', text: s.data_file })] : []));
    const rows = (s.engines || []).map((e) => h('tr', {},
      h('th', { scope: 'row', text: engineNames[e.name] ? t(engineNames[e.name]) : e.name }),
      h('td', { 'data-label': t('admin.state') }, engineState(e)),
      h('td', { 'data-label': t('admin.modelFile'), class: 'mono wrap', text: e.model || '–' }),
      h('td', { 'data-label': t('admin.backend'), text: e.backend || '–' }),
    ));
    const l = s.limits || {};
    const limits = [
      [t('admin.audioPerRequest'), l.max_audio_seconds != null ? fmtDuration(l.max_audio_seconds) : null],
      [t('admin.uploadSize'), l.max_body_bytes != null ? fmtBytes(l.max_body_bytes) : null],
      [t('admin.dialogTurns'), l.max_messages != null ? fmtInt(l.max_messages) : null],
      [t('admin.candidates'), l.max_candidates != null ? t('admin.candidatesLimit', { def: l.default_candidates ?? '–', max: l.max_candidates }) : null],
      [t('admin.inferenceTimeout'), l.infer_timeout_seconds != null ? fmtDuration(l.infer_timeout_seconds) : null],
      [t('admin.adminSession'), l.session_ttl_seconds != null ? fmtDuration(l.session_ttl_seconds) : null],
    ].filter(([, v]) => v != null);
    $('#status-limits').replaceChildren(...limits.map(([k, v]) => fact(k, String(v))));
    $('#status-limits').previousElementSibling.hidden = !limits.length;
    if (!rows.length) rows.push(h('tr', {}, h('td', { colspan: 4, text: t('admin.noEngines') })));
    $('#engines tbody').replaceChildren(...rows);
  } catch (e) {
    showError(err, e);
  }
}

/** Downloads GET /v1/admin/backup (it needs the admin header, so no plain link). */
async function backup() {
  const btn = $('#backup-download');
  btn.disabled = true;
  $('#backup-msg').textContent = t('admin.backupPreparing');
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
    $('#backup-msg').textContent = t('admin.backupDone', { name, size: fmtBytes(blob.size) });
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
