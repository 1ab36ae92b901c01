// "Sign-in methods" on the Status view: the ways into the admin page this box
// offers, and setting up an authenticator app (TOTP). The secret and its QR
// code are shown in this panel only, until Done or until the view is left;
// no page or API call shows them again.
import { api, auth } from './api.js';
import { $, h, showError } from './util.js';
import { t } from '../app/i18n/i18n.js';

let ctx;
let last = {}; // the status last drawn

function item(term, value) {
  return h('div', {}, h('dt', { text: term }), h('dd', { text: value }));
}

/** Draws the methods from GET /v1/admin/status's answer. */
function render(s) {
  last = s || {};
  const channel = last.otp_channel && last.otp_channel !== 'totp' ? last.otp_channel : '';
  $('#signin-facts').replaceChildren(
    item(t('admin.adminKey'), t('admin.worksAlways')),
    item(t('admin.codesSent'), channel ? t('admin.throughChannel', { channel }) : t('admin.noneValue')),
    item(t('admin.authenticatorApp'), last.totp_enrolled ? t('admin.isSetUp') : t('admin.notSetUp')),
  );
  $('#totp-enroll').textContent = last.totp_enrolled ? t('admin.replaceAuthenticatorApp') : t('admin.setUpAuthenticatorApp');
}

/** The QR code's <svg> from replyd's markup: parsed as SVG, never assigned
 * as HTML, so nothing in it can run and the strict CSP needs no exception. */
function svgOf(markup) {
  const root = new DOMParser().parseFromString(markup, 'image/svg+xml').documentElement;
  if (root.namespaceURI !== 'http://www.w3.org/2000/svg' || root.localName !== 'svg') {
    throw new Error(t('admin.qrFailed'));
  }
  const svg = document.importNode(root, true);
  svg.setAttribute('class', 'qr');
  return svg;
}

/** Shows a base32 secret in groups of four. */
const grouped = (secret) => secret.replace(/(.{4})(?=.)/g, '$1 ');

/** Hides the secret and removes it from the page. */
function hide() {
  $('#totp-new').hidden = true;
  $('#totp-secret').textContent = '';
  $('#totp-qr').replaceChildren();
}

/** Enrolls (or replaces) the authenticator app; code is a code sent through
 * the channel, which a session needs (the admin key does not). */
async function enrollWith(code) {
  const btn = $('#totp-enroll');
  btn.disabled = true;
  hide();
  try {
    const r = await api('POST', '/v1/admin/totp/enroll', code ? { json: { code } } : {});
    showError($('#signin-error'), null);
    hideConfirm();
    $('#totp-secret').textContent = grouped(r.secret);
    try {
      $('#totp-qr').replaceChildren(svgOf(r.qr_svg));
    } catch (err) {
      showError($('#signin-error'), err);
    }
    $('#totp-new').hidden = false;
    $('#totp-new').focus();
    render({ ...last, totp_enrolled: true });
  } catch (err) {
    showError($('#signin-error'), err);
    if (code) $('#totp-code').select();
  } finally {
    btn.disabled = false;
  }
}

/** Asks replyd to send a code for the confirmation. */
async function sendCode() {
  $('#totp-sent').textContent = '';
  try {
    const r = await api('POST', '/v1/admin/otp/send', { anonymous: true });
    $('#totp-sent').textContent = r && r.channel ? t('admin.codeSentThrough', { channel: r.channel }) : t('admin.codeSent');
    showError($('#signin-error'), null);
  } catch (err) {
    showError($('#signin-error'), err);
  }
}

function hideConfirm() {
  $('#totp-confirm').hidden = true;
  $('#totp-code').value = '';
  $('#totp-sent').textContent = '';
}

async function enroll() {
  if (last.totp_enrolled && !(await ctx.confirm(t('admin.replaceTotpQ'), t('admin.replaceTotpText'), t('admin.replace')))) return;
  if (!auth.isSession()) {
    await enrollWith('');
    return;
  }
  // A session alone cannot enroll: confirm with a code sent now.
  if (!last.otp_channel || last.otp_channel === 'totp') {
    showError($('#signin-error'), new Error(t('admin.noChannel')));
    return;
  }
  hide();
  $('#totp-confirm').hidden = false;
  $('#totp-confirm-h').focus();
  await sendCode();
  $('#totp-code').focus();
}

export default {
  init(c) {
    ctx = c;
    $('#totp-enroll').addEventListener('click', enroll);
    $('#totp-confirm').addEventListener('submit', (ev) => {
      ev.preventDefault();
      enrollWith($('#totp-code').value.replace(/\s+/g, ''));
    });
    $('#totp-resend').addEventListener('click', sendCode);
    $('#totp-cancel').addEventListener('click', () => {
      hideConfirm();
      $('#totp-enroll').focus();
    });
    $('#totp-done').addEventListener('click', () => {
      hide();
      $('#totp-enroll').focus();
    });
  },
  render,
  hide() {
    hide();
    hideConfirm();
  },
};
