// Keys view: list (optionally with revoked keys) with when each key was last
// used, create (shown once, with replyd's warnings about its name), revoke.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash } from './util.js';
import tablets from './tablets.js';

let ctx;

function hideCreated() {
  $('#key-created-value').value = '';
  $('#key-created-client').textContent = '';
  $('#key-copy-msg').textContent = '';
  $('#key-created-warnings').replaceChildren();
  $('#key-created').hidden = true;
}

async function load() {
  // A tablet that pairs makes a key: the pairing panel wants to know.
  return loadKeys().then((items) => { tablets.keysLoaded(items); });
}

async function loadKeys() {
  try {
    const r = await api('GET', '/v1/admin/keys', {
      query: { limit: 500, include_revoked: $('#keys-revoked').checked ? 'true' : '' },
    });
    showError($('#keys-error'), null);
    const items = (r && r.items) || [];
    render(items);
    return items;
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
      h('th', { scope: 'row', text: k.ClientID || '(none)' }),
      h('td', { 'data-label': 'Status' },
        h('span', { class: `badge ${active ? 'ok' : 'bad'}`, text: k.Status }),
        revokedAt ? h('span', { class: 'hint block' }, 'at ', revokedAt) : ''),
      h('td', { 'data-label': 'Scopes', text: (k.Scopes || []).join(', ') || '–' }),
      h('td', { 'data-label': 'Per minute', class: 'num', text: k.RateLimitPerMinute === 0 ? 'no limit' : k.RateLimitPerMinute ?? '–' }),
      h('td', { 'data-label': 'Created' }, timeEl(k.CreatedAt)),
      // LastUsedAt is written at most once a minute per key.
      h('td', { 'data-label': 'Last used' }, timeEl(k.LastUsedAt) || 'never'),
      h('td', { 'data-label': 'Key hash', class: 'mono', title: k.APIKeyHash, text: shortHash(k.APIKeyHash) }),
      h('td', { class: 'actions' }, active
        ? h('button', { type: 'button', class: 'danger small', 'aria-label': `Revoke key ${k.ClientID}`, text: 'Revoke', onclick: () => revoke(k) })
        : ''),
    );
  }));
}

async function revoke(k) {
  const ok = await ctx.confirm('Revoke this key?',
    `Apps using the key for ${k.ClientID} stop working at once. A revoked key cannot be restored.`, 'Revoke key');
  if (!ok) return;
  try {
    await api('DELETE', `/v1/admin/keys/${encodeURIComponent(k.APIKeyHash)}`);
    showError($('#keys-error'), null);
    $('#keys-msg').textContent = `Key for ${k.ClientID} revoked.`;
  } catch (err) {
    showError($('#keys-error'), err);
  }
  await load();
}

/** The key settings of the create form (the body of POST /v1/admin/keys). */
function keySettings() {
  return {
    client_id: $('#kc-client').value.trim(),
    scopes: $('#kc-scopes').value.split(/[\s,]+/).filter(Boolean),
    rate_limit_per_minute: Number($('#kc-rate').value),
  };
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
    $('#key-created-client').textContent = r.client_id || body.client_id;
    $('#key-created-value').value = r.api_key;
    $('#key-created-warnings').replaceChildren(...(r.warnings || []).map((w) => h('p', { text: `Note: ${w}.` })));
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
    msg.textContent = 'Copied to the clipboard.';
  } catch {
    // No clipboard API (plain HTTP on a LAN): select the text for the admin.
    input.focus();
    input.select();
    const copied = document.execCommand && document.execCommand('copy');
    msg.textContent = copied ? 'Copied to the clipboard.' : 'The key is selected: copy it with your device\'s copy command.';
  }
}

export default {
  init(c) {
    ctx = c;
    $('#key-create-form').addEventListener('submit', create);
    $('#keys-revoked').addEventListener('change', load);
    $('#keys-refresh').addEventListener('click', load);
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
  },
  // The key is never shown again once the admin leaves the view.
  leave() {
    hideCreated();
    tablets.hide();
  },
};
