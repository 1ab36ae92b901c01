// The Models view's comparison: replays the latest recorded turns through a
// language-model file and the active one (POST /v1/admin/models/{name}/compare),
// follows its progress (GET on the same path) and shows the two models'
// figures side by side. Only figures: no dialog text.
import { api, ApiError } from './api.js';
import { $, h, showError, fmtRate, fmtMs, fmtInt } from './util.js';
import { t } from '../app/i18n/i18n.js';

let can = false;
let polling = null; // the file being followed

/** Whether this box compares models (GET /v1/admin/models' compare). */
export function setCanCompare(v) {
  can = !!v;
  $('#models-compare').hidden = !can;
}

/** Shows the latest comparison of the listing (GET /v1/admin/models'
 * comparisons), following it while it runs: what the view shows again
 * after a reload or a visit to another view. */
export function showLatest(comparisons) {
  const all = Object.values(comparisons || {});
  if (all.length === 0) return;
  const running = all.find((c) => c.state === 'running');
  const c = running || all.sort((a, b) => (a.started_at < b.started_at ? 1 : -1))[0];
  show(c, false);
  if (running && polling !== running.model) follow(running.model);
}

/** The Compare button of a file's row: language models not in use. */
export function compareButton(m) {
  if (!can || m.check !== 'ok' || m.kind !== 'llm' || m.active) return '';
  return h('button', { type: 'button', class: 'small', 'data-action': 'compare',
    'aria-label': t('admin.compareModelNamed', { file: m.file }), text: t('admin.compare'), onclick: () => start(m.file) });
}

async function start(file) {
  const status = $('#models-compare-status');
  const err = $('#models-error');
  showError(err, null);
  const turns = Number($('#models-compare-turns').value);
  try {
    const c = await api('POST', `/v1/admin/models/${encodeURIComponent(file)}/compare`, { json: { turns } });
    show(c);
    follow(file);
  } catch (e) {
    status.textContent = '';
    showError(err, e);
    if (e.code === 'conflict' || e.code === 'invalid_request') status.replaceChildren(apiWords(e.message));
  }
}

/** Polls the comparison of file every second until it has finished. */
function follow(file) {
  polling = file;
  const tick = async () => {
    if (polling !== file) return;
    try {
      const c = await api('GET', `/v1/admin/models/${encodeURIComponent(file)}/compare`);
      show(c);
      if (c.state === 'running') setTimeout(tick, 1000);
      else polling = null;
    } catch (e) {
      polling = null;
      showError($('#models-error'), e);
    }
  };
  setTimeout(tick, 500);
}

/** The server's own reason (why there is nothing to replay, what is busy):
 * replyd's English, marked so. */
const apiWords = (message) => h('span', { lang: 'en', text: message });

/** Shows a comparison: its progress while it runs, then the table; a
 * failure's error only when it was followed here (fresh). */
function show(c, fresh = true) {
  const status = $('#models-compare-status');
  const bar = $('#models-compare-progress');
  bar.hidden = c.state !== 'running';
  bar.max = Math.max(c.total, 1);
  bar.value = c.done;
  if (c.state === 'running') {
    $('#models-compare-wrap').hidden = true;
    status.textContent = c.total ? t('admin.comparing', { file: c.model, done: c.done, total: c.total }) : t('admin.compareLoading', { file: c.model });
    return;
  }
  if (c.state === 'failed') {
    status.textContent = t('admin.compareFailed', { file: c.model });
    if (c.error && fresh) {
      showError($('#models-error'), new ApiError(0, c.error.error, c.error.message));
      if (c.error.error === 'conflict') status.replaceChildren(apiWords(c.error.message));
    }
    return;
  }
  status.textContent = t('admin.compareDone', { file: c.model, n: c.turns_found });
  $('#models-compare-cap').textContent = t('admin.compareCaption', { file: c.model, active: c.active.model, n: c.turns_found });
  const steered = (f) => (f.steered_turns ? t('admin.cmpSteeredValue', { ksr: fmtRate(f.steered_ksr), n: f.steered_turns }) : '–');
  const rows = [
    ['admin.cmpTurns', (f) => fmtInt(f.turns)],
    ['admin.cmpExact', (f) => fmtRate(f.exact_rate)],
    ['admin.cmpTop1', (f) => fmtRate(f.top1_rate)],
    ['admin.cmpNear', (f) => fmtRate(f.near_rate)],
    ['admin.cmpKeystrokes', (f) => fmtRate(f.keystroke_saving)],
    ['admin.cmpSteered', steered],
    ['admin.cmpTurnTime', (f) => fmtMs(f.turn_ms)],
    ['admin.cmpReplyTokens', (f) => fmtInt(f.reply_tokens)],
  ];
  $('#models-compare-table tbody').replaceChildren(...rows.map(([key, fmt]) => h('tr', { 'data-figure': key.slice('admin.cmp'.length).toLowerCase() },
    h('th', { scope: 'row', text: t(key) }),
    h('td', { 'data-label': t('admin.activeModel'), class: 'num', text: fmt(c.active) }),
    h('td', { 'data-label': t('admin.candidateModel'), class: 'num', text: fmt(c.candidate) }))));
  $('#models-compare-wrap').hidden = false;
}
