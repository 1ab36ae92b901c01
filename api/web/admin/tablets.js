// "Add tablet" on the Keys view: a one-time pairing code and the QR code of
// the conversation page's pairing link. The tablet trades the code for its
// own key (POST /v1/pair), so nobody types or sees the key. While the panel
// is open the key list is polled, and the panel says when the tablet paired.
import { api } from './api.js';
import { $, h, showError, fmtTime } from './util.js';
import { t, nodes } from '../app/i18n/i18n.js';

let ctx;
let poll = null;
let known = null; // key hashes listed when the code was made
let expires = 0;

/** Shows a code as two groups of four: 7KQ3-MZ2A. */
const grouped = (code) => (code.length === 8 ? `${code.slice(0, 4)}-${code.slice(4)}` : code);

function stopPolling() {
  if (poll) clearInterval(poll);
  poll = null;
}

function hide() {
  stopPolling();
  known = null;
  $('#pairing').hidden = true;
  $('#pairing-code').textContent = '';
  $('#pairing-qr').removeAttribute('src');
  $('#pairing-qr').hidden = true;
  $('#pairing-state').textContent = '';
}

async function create() {
  const form = $('#key-create-form');
  if (!form.reportValidity()) return;
  const btn = $('#kc-pair');
  btn.disabled = true;
  ctx.beforeShow();
  try {
    const r = await api('POST', '/v1/admin/pairings', { json: ctx.settings() });
    showError($('#keys-error'), null);
    $('#pairing-h').replaceChildren(...nodes('admin.pairingFor', { client: h('span', { id: 'pairing-client', text: r.client_id || t('admin.noClientId') }) }));
    $('#pairing-code').textContent = grouped(r.pairing_code);
    $('#pairing-qr').src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(r.qr_svg)}`;
    $('#pairing-qr').hidden = false;
    const link = $('#pairing-link');
    link.href = r.pair_url;
    link.textContent = r.pair_url.replace(/#.*$/, '');
    expires = Date.parse(r.expires_at);
    $('#pairing-expiry').textContent = t('admin.pairingExpiry', { time: fmtTime(r.expires_at) });
    $('#pairing-state').textContent = t('admin.pairingWaiting');
    $('#pairing').hidden = false;
    $('#pairing').focus();
    $('#kc-client').value = '';
    known = null;
    await ctx.reload();
    stopPolling();
    poll = setInterval(() => {
      if (Date.now() > expires) {
        stopPolling();
        $('#pairing-state').textContent = t('admin.pairingExpired');
        return;
      }
      ctx.reload();
    }, 3000);
  } catch (err) {
    showError($('#keys-error'), err);
  } finally {
    btn.disabled = false;
  }
}

/** Called with each fresh key list: a key that was not there when the code
 * was made is the paired tablet's. */
function keysLoaded(items) {
  if (!items || $('#pairing').hidden) return;
  const hashes = items.map((k) => k.APIKeyHash);
  if (known === null) {
    known = new Set(hashes);
    return;
  }
  const fresh = items.find((k) => !known.has(k.APIKeyHash));
  if (fresh) {
    stopPolling();
    $('#pairing-qr').removeAttribute('src');
    $('#pairing-qr').hidden = true;
    $('#pairing-code').textContent = '';
    $('#pairing-state').textContent = fresh.ClientID ? t('admin.pairedAs', { client: fresh.ClientID }) : t('admin.paired');
  }
}

export default {
  init(c) {
    ctx = c;
    $('#kc-pair').addEventListener('click', create);
    $('#pairing-done').addEventListener('click', () => {
      hide();
      $('#kc-client').focus();
    });
  },
  hide,
  keysLoaded,
};
