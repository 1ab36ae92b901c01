// Users view: the users whose replies are remembered, by pseudonym, with the
// tablets (API keys) linked to each memory: link another tablet of the same
// person, unlink one, export the pairs, delete the user.
import { api } from './api.js';
import { $, h, showError, timeEl, shortHash } from './util.js';

let ctx;
let keys = []; // active keys, for naming hashes and the link choice

/** The client ID of a key hash, or its short hash. */
function keyName(hash) {
  const k = keys.find((x) => x.APIKeyHash === hash);
  return k ? k.ClientID || '(no client ID)' : shortHash(hash);
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
      h('td', { 'data-label': 'Pairs', class: 'num', text: u.pairs }),
      h('td', { 'data-label': 'Since' }, timeEl(u.created_at)),
      h('td', { 'data-label': 'Last' }, timeEl(u.last_at) || '–'),
      h('td', { 'data-label': 'Tablets' },
        h('ul', { class: 'plain' }, linked.map((hash) => h('li', {},
          h('span', { title: hash, text: keyName(hash) }), ' ',
          h('button', { type: 'button', class: 'small', 'data-action': 'unlink', 'aria-label': `Unlink ${keyName(hash)} from ${u.user}`, text: 'Unlink',
            onclick: () => unlink(u, hash) })))),
        others.length ? h('div', { class: 'row' },
          h('label', { for: selectId, class: 'sr-only', text: `Tablet to link to ${u.user}` }),
          h('select', { id: selectId }, others.map((k) => h('option', { value: k.APIKeyHash, text: k.ClientID || shortHash(k.APIKeyHash) }))),
          h('button', { type: 'button', class: 'small', 'data-action': 'link', 'aria-label': `Link the chosen tablet to ${u.user}`, text: 'Link',
            onclick: () => link(u, $(`#${CSS.escape(selectId)}`).value) })) : ''),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'small', 'aria-label': `Export the pairs of ${u.user}`, text: 'Export', onclick: () => exportPairs(u) }),
        h('button', { type: 'button', class: 'danger small', 'aria-label': `Delete ${u.user}`, text: 'Delete', onclick: () => remove(u) })),
    );
  }));
}

async function link(u, hash) {
  if (!hash) return;
  const ok = await ctx.confirm('Link this tablet?',
    `${keyName(hash)} will read and add to the remembered replies of ${u.user} whenever it sends that user's user_id. Link only tablets of the same person.`, 'Link');
  if (!ok) return;
  try {
    await api('POST', `/v1/admin/users/${encodeURIComponent(u.user)}/keys`, { json: { api_key_hash: hash } });
    $('#users-msg').textContent = `${keyName(hash)} is linked to ${u.user}.`;
  } catch (err) {
    showError($('#users-error'), err);
  }
  await load();
}

async function unlink(u, hash) {
  try {
    await api('DELETE', `/v1/admin/users/${encodeURIComponent(u.user)}/keys/${encodeURIComponent(hash)}`);
    $('#users-msg').textContent = `${keyName(hash)} no longer uses the memory of ${u.user}.`;
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
    $('#users-msg').textContent = `Exported the pairs of ${u.user}.`;
  } catch (err) {
    showError($('#users-error'), err);
  }
}

async function remove(u) {
  const ok = await ctx.confirm('Delete this user?',
    `Everything replyd keeps for ${u.user} goes: the remembered replies, the texts awaiting feedback and the reported outcomes. This cannot be undone.`, 'Delete user');
  if (!ok) return;
  try {
    await api('DELETE', `/v1/admin/users/${encodeURIComponent(u.user)}`);
    $('#users-msg').textContent = `${u.user} deleted.`;
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
