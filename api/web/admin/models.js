// Models view: the model files in the data directory's models folder, each
// checked (kind, size, SHA-256, manifest status, in use), with an upload
// (streamed by the browser as the raw body), removal of a file not in use,
// a switch to a checked file without a restart, each Whisper file's window
// declaration (made for a short window, or stock) with a button that
// changes it, and, per box, the models it chose with a roll back to the one
// before.
import { api, ApiError } from './api.js';
import { $, h, showError, fmtBytes, timeEl } from './util.js';
import { t } from '../app/i18n/i18n.js';
import { setCanCompare, compareButton, showLatest } from './compare.js';

let ctx;
let node = '';
let canSwitch = false;
let canTime = false;
let windows = {};

// A failed listing shows its error; a successful one leaves the error of
// the upload or removal that preceded it in view.
async function load() {
  try {
    const r = await api('GET', '/v1/admin/models');
    $('#models-free').textContent = r.free_bytes >= 0 ? t('admin.freeDiskSpace', { size: fmtBytes(r.free_bytes) }) : '';
    node = r.node || '';
    canSwitch = !!r.switch;
    canTime = !!r.time;
    windows = r.windows || {};
    setCanCompare(r.compare);
    render(r.models || []);
    renderTimings(r.timings || {});
    showLatest(r.comparisons);
    renderBoxes(r.boxes || []);
  } catch (err) {
    showError($('#models-error'), err);
  }
}

function render(items) {
  $('#models-empty').hidden = items.length > 0;
  $('#models-table tbody').replaceChildren(...items.map((m) => h('tr', { 'data-file': m.file },
    h('th', { scope: 'row', class: 'mono', text: m.file, title: `sha256 ${m.sha256}` }),
    h('td', { 'data-label': t('admin.kind') }, m.kind || '–', windowNote(m)),
    h('td', { 'data-label': t('admin.size'), class: 'num', text: fmtBytes(m.bytes) }),
    h('td', { 'data-label': t('admin.check'), class: m.check === 'ok' ? '' : 'error', text: m.check === 'ok' ? t('admin.checkOk') : m.check }),
    h('td', { 'data-label': t('admin.manifest'), text: m.manifest }),
    h('td', { 'data-label': t('admin.inUse'), text: m.active ? t('admin.yes') : '–' }),
    h('td', { class: 'actions' }, m.active ? '' : [
      canSwitch && m.check === 'ok' && m.kind ? h('button', { type: 'button', class: 'small', 'data-action': 'use',
        'aria-label': t('admin.useModelNamed', { file: m.file }), text: t('admin.use'), onclick: () => use(m) }) : '',
      canTime && m.check === 'ok' && m.kind ? h('button', { type: 'button', class: 'small', 'data-action': 'time',
        'aria-label': t('admin.timeModelNamed', { file: m.file }), text: t('admin.timeIt'), onclick: () => timeModel(m) }) : '',
      windowButton(m),
      compareButton(m),
      h('button', { type: 'button', class: 'danger small',
        'aria-label': t('admin.removeModelNamed', { file: m.file }), text: t('admin.remove'), onclick: () => remove(m) })]),
  )));
}

/** A Whisper file's window declaration in words, under its kind. */
function windowNote(m) {
  const w = windows[m.file];
  if (!w) return '';
  const what = t(w.short_window ? 'admin.windowShort' : 'admin.windowStock');
  return [h('br'), h('small', { class: 'note', 'data-window': w.short_window ? 'short' : 'stock',
    text: w.source === 'default' ? t('admin.windowDefault', { what }) : what })];
}

/** The button that declares a Whisper file the other way. */
function windowButton(m) {
  const w = windows[m.file];
  if (!w) return '';
  const short = !w.short_window;
  return h('button', { type: 'button', class: 'small', 'data-action': 'window',
    'aria-label': t(short ? 'admin.declareShortNamed' : 'admin.declareStockNamed', { file: m.file }),
    text: t(short ? 'admin.declareShort' : 'admin.declareStock'), onclick: () => declareWindow(m, short) });
}

async function declareWindow(m, short) {
  showError($('#models-error'), null);
  try {
    const r = await api('PUT', `/v1/admin/models/${encodeURIComponent(m.file)}/window`, { json: { short_window: short } });
    const what = t(r.short_window ? 'admin.windowShort' : 'admin.windowStock');
    $('#models-msg').textContent = t(r.active ? 'admin.windowDeclaredNow' : 'admin.windowDeclaredLater', { file: m.file, what });
  } catch (err) {
    showError($('#models-error'), err);
  }
  await load();
}

/** One model's figures in words: a language model's speeds and budget, Whisper's real-time factor. */
function figures(f) {
  if (f.real_time_factor) {
    const w = t('admin.whisperFigures', { rtf: f.real_time_factor, s: f.audio_seconds });
    // The window rule it was timed with, in the server's words (as the Status view shows it).
    return f.window ? [w, '; ', t('admin.timedWindow'), ' ', h('span', { lang: 'en', 'data-window': '', text: f.window })] : w;
  }
  return t('admin.llmFigures', { tps: f.prompt_tokens_per_s || '–', n: f.candidates || '–', step: f.step_ms || '–', budget: f.history_budget_tokens || '–' });
}

/** The turn to expect: the figure, with how it was reached under it. */
function turnCell(label, f, withName) {
  return h('td', { 'data-label': label },
    h('span', { class: 'num', text: f.turn_ms ? `${f.turn_ms} ms` : '–' }),
    h('br'), h('small', { class: 'note' }, withName ? `${f.model}: ` : '', figures(f)));
}

/** The stored timings, each beside the active model's own figures. */
function renderTimings(timings) {
  const rows = Object.keys(timings).sort().map((file) => {
    const tm = timings[file];
    return h('tr', { 'data-file': file },
      h('th', { scope: 'row', class: 'mono', text: file }),
      h('td', { 'data-label': t('admin.kind'), text: tm.kind }),
      turnCell(t('admin.turnToExpect'), tm.candidate, false),
      turnCell(t('admin.activeModel'), tm.active, true),
      h('td', { 'data-label': t('admin.time') }, timeEl(tm.at)));
  });
  $('#models-timings-wrap').hidden = rows.length === 0;
  $('#models-timings tbody').replaceChildren(...rows);
}

async function timeModel(m) {
  showError($('#models-error'), null);
  $('#models-msg').textContent = t('admin.timingModel', { file: m.file });
  try {
    const r = await api('POST', `/v1/admin/models/${encodeURIComponent(m.file)}/time`);
    $('#models-msg').textContent = t('admin.modelTimed', { file: m.file, ms: r.candidate.turn_ms, active: r.active.model, activeMs: r.active.turn_ms });
  } catch (err) {
    $('#models-msg').textContent = '';
    showError($('#models-error'), err);
    explain(err);
  }
  await load();
}

/** Each box's chosen models; this box's with a roll back to the one before. */
function renderBoxes(boxes) {
  $('#models-boxes-empty').hidden = boxes.length > 0;
  $('#models-boxes-wrap').hidden = boxes.length === 0;
  $('#models-boxes tbody').replaceChildren(...boxes.map((b) => h('tr', { 'data-node': b.node, 'data-kind': b.kind },
    h('th', { scope: 'row', text: b.node }),
    h('td', { 'data-label': t('admin.kind'), text: b.kind }),
    h('td', { 'data-label': t('admin.file'), class: 'mono', text: b.model }),
    h('td', { 'data-label': t('admin.before'), class: 'mono', text: b.previous || '–' }),
    h('td', { 'data-label': t('admin.time') }, timeEl(b.at)),
    h('td', { class: 'actions' }, canSwitch && b.node === node && b.previous ? h('button', { type: 'button', class: 'small', 'data-action': 'rollback',
      'aria-label': t('admin.rollBackNamed', { kind: b.kind, node: b.node, file: b.previous }), text: t('admin.rollBack'), onclick: () => rollBack(b) }) : ''),
  )));
}

/** Runs one switch (activate or roll back) and says what it did. */
async function switchModel(path, file) {
  showError($('#models-error'), null);
  $('#models-msg').textContent = t('admin.switchingTo', { file });
  try {
    const r = await api('POST', path);
    $('#models-msg').textContent = t(r.mode === 'beside' ? 'admin.switchedBeside' : 'admin.switchedSwap', { file: r.model, previous: r.previous });
  } catch (err) {
    $('#models-msg').textContent = '';
    showError($('#models-error'), err);
    explain(err);
  }
  await load();
}

async function use(m) {
  const ok = await ctx.confirm(t('admin.switchModelQ'), t('admin.switchModelText', { file: m.file, kind: m.kind }), t('admin.use'));
  if (ok) await switchModel(`/v1/admin/models/${encodeURIComponent(m.file)}/activate`, m.file);
}

async function rollBack(b) {
  const ok = await ctx.confirm(t('admin.rollBackQ'), t('admin.rollBackText', { file: b.previous, kind: b.kind }), t('admin.rollBack'));
  if (ok) await switchModel(`/v1/admin/models/${encodeURIComponent(b.kind)}/rollback`, b.previous);
}

/** The server's own reason where it is the point (a refused file, too little space). */
function explain(err) {
  if (err instanceof ApiError && (err.code === 'invalid_model' || err.code === 'insufficient_storage' || err.code === 'conflict')) {
    $('#models-msg').textContent = err.message;
  }
}

async function upload(ev) {
  ev.preventDefault();
  const file = $('#models-file').files[0];
  if (!file) return;
  const btn = $('#models-upload-btn');
  btn.disabled = true;
  showError($('#models-error'), null);
  $('#models-msg').textContent = t('admin.uploadingFile', { file: file.name });
  try {
    // The declaration goes with a Whisper file only (a .gguf with it is 400).
    const short = $('#models-short-window').checked && file.name.endsWith('.bin');
    await api('POST', '/v1/admin/models', { query: { name: file.name, short_window: short ? 'true' : '' }, file });
    $('#models-msg').textContent = t('admin.modelAdded', { file: file.name });
    $('#models-file').value = '';
    $('#models-short-window').checked = false;
  } catch (err) {
    $('#models-msg').textContent = '';
    showError($('#models-error'), err);
    explain(err);
  } finally {
    btn.disabled = false;
  }
  await load();
}

async function remove(m) {
  const ok = await ctx.confirm(t('admin.removeModelQ'), t('admin.removeModelText', { file: m.file }), t('admin.remove'));
  if (!ok) return;
  showError($('#models-error'), null);
  try {
    await api('DELETE', `/v1/admin/models/${encodeURIComponent(m.file)}`);
    $('#models-msg').textContent = t('admin.modelRemoved', { file: m.file });
  } catch (err) {
    showError($('#models-error'), err);
  }
  await load();
}

export default {
  init(c) {
    ctx = c;
    $('#models-refresh').addEventListener('click', load);
    $('#models-upload').addEventListener('submit', upload);
  },
  enter() {
    $('#models-msg').textContent = '';
    showError($('#models-error'), null);
    load();
  },
};
