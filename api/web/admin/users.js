// Users view: the users whose replies are remembered, by pseudonym, with the
// tablets (API keys) linked to each memory: link another tablet of the same
// person, unlink one, export the pairs, delete the user.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash, fmtInt } from './util.js';
import { t } from '../app/i18n/i18n.js';

let ctx;
let keys = []; // active keys, for naming hashes and the link choice

/** The client ID of a key hash, or its short hash. */
function keyName(hash) {
  const k = keys.find((x) => x.APIKeyHash === hash);
  return k ? k.ClientID || t('admin.noClientId') : shortHash(hash);
}

async function load() {
  try {
    const [u, k] = await Promise.all([
      api('GET', '/v1/admin/users'),
      api('GET', '/v1/admin/keys', { query: { limit: 500 } }),
    ]);
    keys = (k && k.items) || [];
    showError($('#users-error'), null);
    render((u && u.items) || []);
  } catch (err) {
    showError($('#users-error'), err);
  }
}

function render(items) {
  $('#users-empty').hidden = items.length > 0;
  $('#users-table tbody').replaceChildren(...items.map((u) => {
    const linked = u.keys || [];
    const others = keys.filter((k) => !linked.includes(k.APIKeyHash));
    const selectId = `users-link-${u.user}`;
    return h('tr', { 'data-user': u.user },
      h('th', { scope: 'row', class: 'mono', text: u.user }),
      h('td', { 'data-label': t('admin.pairs'), class: 'num', text: fmtInt(u.pairs) }),
      h('td', { 'data-label': t('admin.since') }, timeEl(u.created_at)),
      h('td', { 'data-label': t('admin.last') }, timeEl(u.last_at) || '–'),
      h('td', { 'data-label': t('admin.tablets') },
        h('ul', { class: 'plain' }, linked.map((hash) => h('li', {},
          h('span', { title: hash, text: keyName(hash) }), ' ',
          h('button', { type: 'button', class: 'small', 'data-action': 'unlink', 'aria-label': t('admin.unlinkFrom', { tablet: keyName(hash), user: u.user }), text: t('admin.unlink'),
            onclick: () => unlink(u, hash) })))),
        others.length ? h('div', { class: 'row' },
          h('label', { for: selectId, class: 'sr-only', text: t('admin.tabletToLink', { user: u.user }) }),
          h('select', { id: selectId }, others.map((k) => h('option', { value: k.APIKeyHash, text: k.ClientID || shortHash(k.APIKeyHash) }))),
          h('button', { type: 'button', class: 'small', 'data-action': 'link', 'aria-label': t('admin.linkChosen', { user: u.user }), text: t('admin.link'),
            onclick: () => link(u, $(`#${CSS.escape(selectId)}`).value) })) : ''),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'small', 'aria-label': t('admin.exportPairsOf', { user: u.user }), text: t('admin.export'), onclick: () => exportPairs(u) }),
        h('button', { type: 'button', class: 'danger small', 'aria-label': t('admin.deleteUserNamed', { user: u.user }), text: t('admin.delete'), onclick: () => remove(u) })),
    );
  }));
}

async function link(u, hash) {
  if (!hash) return;
  const ok = await ctx.confirm(t('admin.linkQ'), t('admin.linkText', { tablet: keyName(hash), user: u.user }), t('admin.link'));
  if (!ok) return;
  try {
    await api('POST', `/v1/admin/users/${encodeURIComponent(u.user)}/keys`, { json: { api_key_hash: hash } });
    $('#users-msg').textContent = t('admin.linked', { tablet: keyName(hash), user: u.user });
  } catch (err) {
    showError($('#users-error'), err);
  }
  await load();
}

async function unlink(u, hash) {
  try {
    await api('DELETE', `/v1/admin/users/${encodeURIComponent(u.user)}/keys/${encodeURIComponent(hash)}`);
    $('#users-msg').textContent = t('admin.unlinked', { tablet: keyName(hash), user: u.user });
  } catch (err) {
    showError($('#users-error'), err);
  }
  await load();
}

async function exportPairs(u) {
  try {
    const res = await api('GET', `/v1/admin/users/${encodeURIComponent(u.user)}/pairs`, { raw: true, query: { format: 'jsonl' } });
    const blob = await res.blob();
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: `${u.user}-pairs.jsonl`, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    $('#users-msg').textContent = t('admin.exported', { user: u.user });
  } catch (err) {
    showError($('#users-error'), err);
  }
}

async function remove(u) {
  const ok = await ctx.confirm(t('admin.deleteUserQ'), t('admin.deleteUserText', { user: u.user }), t('admin.deleteUser'));
  if (!ok) return;
  try {
    await api('DELETE', `/v1/admin/users/${encodeURIComponent(u.user)}`);
    $('#users-msg').textContent = t('admin.userDeleted', { user: u.user });
  } catch (err) {
    showError($('#users-error'), err);
  }
  await load();
}

export default {
  init(c) {
    ctx = c;
    $('#users-refresh').addEventListener('click', load);
  },
  enter() {
    $('#users-msg').textContent = '';
    load();
  },
};
