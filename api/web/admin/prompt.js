// System prompt view: edit and save as a new version, history (each version
// readable before it is restored), restore.
import { api } from './api.js';
import { $, h, showError, timeEl, fmtRate, fmtInt } from './util.js';
import { t, nodes } from '../app/i18n/i18n.js';

let ctx;
let saved = ''; // the text of the current version, to tell edits apart
let current = ''; // its version
let acceptance = new Map(); // version -> its by_prompt_version entry

/** What the outcome loop says about one version, in words. */
function acceptanceText(version) {
  const v = acceptance.get(version);
  if (!v || !v.outcomes) return t('admin.noOutcomes');
  return t('admin.versionAcceptance', { rate: fmtRate(v.acceptance_rate), n: v.outcomes });
}

const dirty = () => $('#prompt-text').value !== saved;

async function load() {
  const err = $('#prompt-error');
  try {
    const [cur, hist, stats] = await Promise.all([
      api('GET', '/v1/admin/system-prompt').catch((e) => {
        if (e.status === 404) return { prompt: '', version: '' };
        throw e;
      }),
      api('GET', '/v1/admin/system-prompt/history', { query: { limit: 50 } }),
      // How often each version's suggestions were spoken; the history shows
      // the prompt even when the statistics cannot be read.
      api('GET', '/v1/admin/stats', { query: { window: '366d' } }).catch(() => null),
    ]);
    acceptance = new Map(((stats && stats.by_prompt_version) || []).map((v) => [v.version, v]));
    showError(err, null);
    saved = (cur && cur.prompt) || '';
    $('#prompt-text').value = saved;
    const v = h('span', { id: 'prompt-version', text: (cur && cur.version) || t('admin.noneValue') });
    $('#prompt-label').replaceChildren(...nodes('admin.promptLabel', { version: v }));
    current = (cur && cur.version) || '';
    renderHistory((hist && hist.items) || [], cur && cur.version);
  } catch (e) {
    showError(err, e);
  }
}

function renderHistory(items, currentVersion) {
  $('#prompt-history-empty').hidden = items.length > 0;
  $('#prompt-history').replaceChildren(...items.map((p) => {
    const isCurrent = p.version === currentVersion;
    return h('li', { 'data-version': p.version },
      h('details', {},
        h('summary', {},
          h('span', { class: 'ver', text: t('admin.versionN', { version: p.version }) }),
          isCurrent ? h('span', { class: 'badge ok', text: t('admin.current') }) : '',
          ' ', timeEl(p.created_at), ' ',
          h('span', { class: 'acceptance', 'data-version': p.version, text: acceptanceText(p.version) }),
          h('span', { class: 'preview', text: preview(p.prompt) })),
        h('pre', { class: 'prompt-text', text: p.prompt })),
      isCurrent ? '' : h('button', {
        type: 'button', class: 'small', text: t('admin.restore'),
        'aria-label': t('admin.restoreVersion', { version: p.version }),
        onclick: () => restore(p),
      }),
    );
  }));
}

async function save(text, message) {
  const btn = $('#prompt-save');
  btn.disabled = true;
  try {
    const r = await api('POST', '/v1/admin/system-prompt', { json: { prompt: text } });
    showError($('#prompt-error'), null);
    await load();
    const version = (r && r.version) || current;
    $('#prompt-msg').textContent = message(version);
  } catch (e) {
    showError($('#prompt-error'), e);
  } finally {
    btn.disabled = false;
  }
}

/** The first words of a prompt, for the history list. */
function preview(text) {
  const line = (text || '').replace(/\s+/g, ' ').trim();
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}

async function restore(p) {
  // The admin reads what they restore before anything changes.
  const text = dirty() ? t('admin.restoreTextDirty') : t('admin.restoreText');
  if (!(await ctx.confirm(t('admin.restoreQ', { version: p.version }), text, t('admin.restore'), p.prompt))) return;
  await save(p.prompt, (v) => t('admin.restored', { version: p.version, now: v }));
  $('#prompt-text').focus();
}

export default {
  init(c) {
    ctx = c;
    $('#prompt-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (!dirty()) {
        $('#prompt-msg').textContent = t('admin.nothingChanged');
        return;
      }
      save($('#prompt-text').value, (v) => t('admin.savedAs', { version: v }));
    });
    $('#prompt-discard').addEventListener('click', () => {
      $('#prompt-text').value = saved;
      $('#prompt-msg').textContent = t('admin.editsDiscarded');
    });
  },
  enter() {
    $('#prompt-msg').textContent = '';
    load();
  },
};
