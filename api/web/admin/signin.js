// "Sign-in methods" on the Status view: the ways into the admin page this box
// offers, and setting up an authenticator app (TOTP). The secret and its QR
// code are shown in this panel only, until Done or until the view is left;
// no page or API call shows them again.
import { api } from './api.js';
import { $, h, showError } from './util.js';

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
    item('Admin key', 'works always'),
    item('Codes sent', channel ? `through ${channel}` : 'none'),
    item('Authenticator app', last.totp_enrolled ? 'set up' : 'not set up'),
  );
  $('#totp-enroll').textContent = last.totp_enrolled ? 'Replace authenticator app' : 'Set up authenticator app';
}

/** The QR code's <svg> from replyd's markup: parsed as SVG, never assigned
 * as HTML, so nothing in it can run and the strict CSP needs no exception. */
function svgOf(markup) {
  const root = new DOMParser().parseFromString(markup, 'image/svg+xml').documentElement;
  if (root.namespaceURI !== 'http://www.w3.org/2000/svg' || root.localName !== 'svg') {
    throw new Error('The QR code could not be shown: type the secret into the app instead.');
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

async function enroll() {
  if (last.totp_enrolled && !(await ctx.confirm('Replace the authenticator app?',
    'The app set up before stops working: its codes no longer sign in. Add replyd to the app again with the new secret.',
    'Replace'))) return;
  const btn = $('#totp-enroll');
  btn.disabled = true;
  hide();
  try {
    const r = await api('POST', '/v1/admin/totp/enroll');
    showError($('#signin-error'), null);
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
  } finally {
    btn.disabled = false;
  }
}

export default {
  init(c) {
    ctx = c;
    $('#totp-enroll').addEventListener('click', enroll);
    $('#totp-done').addEventListener('click', () => {
      hide();
      $('#totp-enroll').focus();
    });
  },
  render,
  hide,
};
