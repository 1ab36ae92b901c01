// Keys view: list (optionally with revoked keys, 500 at a time, "Show more
// keys" for the next page) with when each key was last used, create (shown once, with replyd's warnings about its name), revoke.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash, fmtInt } from './util.js';
import { t, nodes } from '../app/i18n/i18n.js';
import tablets from './tablets.js';

let ctx;

function hideCreated() {
  $('#key-created-value').value = '';
  $('#key-created-h').textContent = '';
  $('#key-copy-msg').textContent = '';
  $('#key-created-warnings').replaceChildren();
  $('#key-created').hidden = true;
}

async function load() {
  // A tablet that pairs makes a key: the pairing panel wants to know.
  return loadKeys().then((items) => { tablets.keysLoaded(items); });
}

// The keys shown, and where the list goes on (the API's next_cursor; '' when
// every key is shown).
let shown = [];
let nextCursor = '';

/** Loads the first page of keys, or with more the next one after those
 * shown: the API answers a page at a time, with next_cursor while more
 * keys follow. */
async function loadKeys(more = false) {
  try {
    const query = { limit: 500, include_revoked: $('#keys-revoked').checked ? 'true' : '' };
    if (more) query.cursor = nextCursor;
    const r = await api('GET', '/v1/admin/keys', { query });
    showError($('#keys-error'), null);
    const items = (r && r.items) || [];
    shown = more ? shown.concat(items) : items;
    nextCursor = (r && r.next_cursor) || '';
    $('#keys-more').hidden = !nextCursor;
    render(shown);
    return shown;
  } catch (err) {
    showError($('#keys-error'), err);
    return null;
  }
}

function render(items) {
  $('#keys-empty').hidden = items.length > 0;
  $('#keys-table tbody').replaceChildren(...items.map((k) => {
    const active = k.Status === 'active';
    const revokedAt = timeEl(k.RevokedAt);
    return h('tr', { 'data-hash': k.APIKeyHash, 'data-client': k.ClientID, class: active ? '' : 'dim' },
      h('th', { scope: 'row', text: k.ClientID || t('admin.noClientId') }),
      h('td', { 'data-label': t('admin.status') },
        h('span', { class: `badge ${active ? 'ok' : 'bad'}`, text: active ? t('admin.keyActive') : t('admin.keyRevoked') }),
        revokedAt ? h('span', { class: 'hint block' }, t('admin.revokedAt'), ' ', revokedAt) : ''),
      // Scope names are the API's words: translate=no keeps them as they are.
      h('td', { 'data-label': t('admin.scopes'), translate: 'no', text: (k.Scopes || []).join(', ') || '–' }),
      h('td', { 'data-label': t('admin.perMinute'), class: 'num', text: k.RateLimitPerMinute === 0 ? t('admin.noLimit') : fmtInt(k.RateLimitPerMinute) }),
      h('td', { 'data-label': t('admin.created') }, timeEl(k.CreatedAt)),
      // LastUsedAt is written at most once a minute per key.
      h('td', { 'data-label': t('admin.lastUsed') }, timeEl(k.LastUsedAt) || t('admin.never')),
      h('td', { 'data-label': t('admin.keyHash'), class: 'mono', title: k.APIKeyHash, text: shortHash(k.APIKeyHash) }),
      h('td', { 'data-label': t('admin.liveListening'), class: 'live-cell' }, liveSwitch(k, active)),
      h('td', { class: 'actions' }, active
        ? h('button', { type: 'button', class: 'danger small', 'aria-label': t('admin.revokeKeyOf', { client: k.ClientID }), text: t('admin.revoke'), onclick: () => revoke(k) })
        : ''),
    );
  }));
}

/** The key's live listening switch (the user's consent to the tablet
 * streaming the microphone): a checkbox with the switch role and its state
 * in words beside it. A revoked key shows its state only. */
function liveSwitch(k, active) {
  if (typeof k.LiveListening !== 'boolean') return '–';
  const state = h('span', { class: 'live-state', 'aria-hidden': 'true', text: k.LiveListening ? t('admin.on') : t('admin.off') });
  if (!active) return state;
  const input = h('input', {
    type: 'checkbox', role: 'switch', class: 'live-switch', checked: k.LiveListening,
    'aria-label': t('admin.liveOfKey', { client: k.ClientID || t('admin.noClientId') }),
    onchange: (ev) => switchLive(k, ev.target),
  });
  return h('label', { class: 'live-toggle' }, input, state);
}

async function switchLive(k, input) {
  const enabled = input.checked;
  input.disabled = true;
  const client = k.ClientID || t('admin.noClientId');
  try {
    await api('PUT', `/v1/admin/keys/${encodeURIComponent(k.APIKeyHash)}/live`, { json: { enabled } });
    showError($('#keys-error'), null);
    $('#keys-msg').textContent = t(enabled ? 'admin.liveSwitchedOn' : 'admin.liveSwitchedOff', { client });
  } catch (err) {
    showError($('#keys-error'), err);
  }
  await load();
}

async function revoke(k) {
  const ok = await ctx.confirm(t('admin.revokeQ'), t('admin.revokeText', { client: k.ClientID }), t('admin.revokeKey'));
  if (!ok) return;
  try {
    await api('DELETE', `/v1/admin/keys/${encodeURIComponent(k.APIKeyHash)}`);
    showError($('#keys-error'), null);
    $('#keys-msg').textContent = t('admin.keyRevokedMsg', { client: k.ClientID });
  } catch (err) {
    showError($('#keys-error'), err);
  }
  await load();
}

/** The key settings of the create form (the body of POST /v1/admin/keys). */
function keySettings() {
  const body = {
    client_id: $('#kc-client').value.trim(),
    scopes: $('#kc-scopes').value.split(/[\s,]+/).filter(Boolean),
    rate_limit_per_minute: Number($('#kc-rate').value),
  };
  if ($('#kc-memory').value) body.memory_user = $('#kc-memory').value;
  return body;
}

/** Fills the "Remembered replies" choice with the users kept. */
async function loadUsers() {
  const sel = $('#kc-memory');
  try {
    const r = await api('GET', '/v1/admin/users');
    const chosen = sel.value;
    sel.replaceChildren(h('option', { value: '', text: t('admin.itsOwn') }),
      ...((r && r.items) || []).map((u) => h('option', { value: u.user, text: t('admin.sharedWith', { user: u.user }) })));
    sel.value = chosen;
    if (sel.value !== chosen) sel.value = '';
  } catch {
    // The key can be created without: the choice stays "Its own".
  }
}

async function create(ev) {
  ev.preventDefault();
  const btn = $('#kc-submit');
  const body = keySettings();
  tablets.hide();
  btn.disabled = true;
  try {
    const r = await api('POST', '/v1/admin/keys', { json: body });
    showError($('#keys-error'), null);
    $('#keys-msg').textContent = '';
    $('#key-created-h').replaceChildren(...nodes('admin.keyFor', { client: h('span', { id: 'key-created-client', text: r.client_id || body.client_id }) }));
    $('#key-created-value').value = r.api_key;
    $('#key-created-warnings').replaceChildren(...(r.warnings || []).map((w) => h('p', { text: t('admin.keyWarning', { warning: w }) })));
    $('#key-created').hidden = false;
    $('#key-created').focus();
    $('#kc-client').value = '';
    await load();
  } catch (err) {
    showError($('#keys-error'), err);
  } finally {
    btn.disabled = false;
  }
}

async function copy() {
  const input = $('#key-created-value');
  const msg = $('#key-copy-msg');
  try {
    await navigator.clipboard.writeText(input.value);
    msg.textContent = t('admin.copied');
  } catch {
    // No clipboard API (plain HTTP on a LAN): select the text for the admin.
    input.focus();
    input.select();
    const copied = document.execCommand && document.execCommand('copy');
    msg.textContent = copied ? t('admin.copied') : t('admin.keySelected');
  }
}

export default {
  init(c) {
    ctx = c;
    $('#key-create-form').addEventListener('submit', create);
    $('#keys-revoked').addEventListener('change', load);
    $('#keys-refresh').addEventListener('click', load);
    $('#keys-more').addEventListener('click', () => loadKeys(true).then((items) => { if (items) tablets.keysLoaded(items); }));
    $('#key-copy').addEventListener('click', copy);
    $('#key-created-done').addEventListener('click', () => {
      hideCreated();
      $('#kc-client').focus();
    });
    tablets.init({ settings: keySettings, reload: load, beforeShow: hideCreated });
  },
  enter() {
    $('#keys-msg').textContent = '';
    load();
    loadUsers();
  },
  // The key is never shown again once the admin leaves the view.
  leave() {
    hideCreated();
    tablets.hide();
  },
};
