// The replyd admin page: sign-in, the hash router (#/keys, ...) and the views.
import { api, auth, onUnauthorized } from './api.js';
import { $, showError, fmtTime, setLocale } from './util.js';
import { load as loadCatalog, pick, translate, t, errorText, LANGS, NAMES } from '../app/i18n/i18n.js';
import status from './status.js';
import keys from './keys.js';
import users from './users.js';
import prompt from './prompt.js';
import logs from './logs.js';
import stats from './stats.js';
import tryit from './try.js';
import modelsView from './models.js';

const views = { status, keys, users, models: modelsView, prompt, logs, stats, try: tryit };
let current = null;

/**
 * Asks a yes/no question in a modal dialog; resolves true on OK. detail,
 * when given, is shown in full below the question (e.g. the text a restore
 * would bring back).
 */
function confirmDialog(title, text, okLabel, detail) {
  const dlg = $('#confirm');
  $('#confirm-h').textContent = title;
  $('#confirm-text').textContent = text;
  $('#confirm-detail').textContent = detail || '';
  $('#confirm-detail').hidden = !detail;
  $('#confirm-ok').textContent = okLabel;
  const opener = document.activeElement;
  dlg.returnValue = 'cancel';
  dlg.showModal();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      if (opener && opener.isConnected) opener.focus();
      resolve(dlg.returnValue === 'ok');
    }, { once: true });
  });
}

function routeName() {
  const name = location.hash.replace(/^#\/?/, '');
  return Object.hasOwn(views, name) ? name : 'status';
}

function show(name, focus) {
  if (current && current !== name) views[current].leave?.();
  const signedIn = name !== 'login';
  $('#nav').hidden = !signedIn;
  $('#logout').hidden = !signedIn;
  for (const sec of document.querySelectorAll('main > .view')) sec.hidden = sec.id !== `view-${name}`;
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const heading = $(`#view-${name} h1`);
  document.title = t('admin.pageTitle', { view: heading.textContent });
  if (focus) heading.focus();
  current = signedIn ? name : null;
  if (signedIn) views[name].enter();
}

function route(focus = true) {
  if (!auth.header()) {
    show('login', focus);
    return;
  }
  const name = routeName();
  if (location.hash !== `#/${name}`) history.replaceState(null, '', `#/${name}`);
  show(name, focus);
}

/** Shows the demo-model banner when any engine runs a demo model. */
function setDemoBanner(engines) {
  $('#demo-banner').hidden = !(engines || []).some((e) => e.demo);
}

/** Fetches the status once to show or hide the demo-model banner. */
function checkDemo() {
  api('GET', '/v1/admin/status').then((s) => setDemoBanner(s && s.engines), () => {});
}

async function afterSignIn() {
  $('#otp-code').value = '';
  $('#admin-key').value = '';
  $('#otp-sent').textContent = '';
  $('#login-msg').textContent = '';
  showError($('#login-error'), null);
  route(true);
  checkDemo();
}

function signOut(message) {
  auth.clear();
  $('#demo-banner').hidden = true;
  $('#login-msg').textContent = message;
  route(true);
}

function initLogin() {
  const sendBtn = $('#otp-send');
  $('#otp-send-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showError($('#login-error'), null);
    sendBtn.disabled = true;
    try {
      const r = await api('POST', '/v1/admin/otp/send', { anonymous: true });
      const sent = r && r.channel ? t('admin.codeSentThrough', { channel: r.channel }) : t('admin.codeSent');
      const until = r && r.expires_at ? ` ${t('admin.codeValidUntil', { time: fmtTime(r.expires_at) })}` : '';
      $('#otp-sent').textContent = `${sent}${until}`;
      $('#otp-code').focus();
    } catch (err) {
      showError($('#login-error'), err);
    } finally {
      sendBtn.disabled = false;
    }
  });

  $('#otp-verify-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showError($('#login-error'), null);
    const code = $('#otp-code').value.replace(/\s+/g, '');
    const btn = $('#otp-verify');
    btn.disabled = true;
    try {
      const r = await api('POST', '/v1/admin/otp/verify', { anonymous: true, json: { code } });
      auth.setSession(r.session_token);
      await afterSignIn();
    } catch (err) {
      showError($('#login-error'), err);
      if (err.status === 401) $('#login-error').textContent += ` ${t('admin.checkCode')}`;
      $('#otp-code').select();
    } finally {
      btn.disabled = false;
    }
  });

  $('#key-login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showError($('#login-error'), null);
    const key = $('#admin-key').value.trim();
    const btn = $('#key-login');
    btn.disabled = true;
    try {
      // Check the key before keeping it.
      await api('GET', '/v1/admin/status', { credential: ['X-ADMIN-KEY', key] });
      auth.setAdminKey(key);
      await afterSignIn();
    } catch (err) {
      showError($('#login-error'), err);
      $('#admin-key').select();
    } finally {
      btn.disabled = false;
    }
  });

  $('#logout').addEventListener('click', async () => {
    if (auth.isSession()) {
      try { await api('DELETE', '/v1/admin/session'); } catch { /* signed out locally anyway */ }
    }
    signOut(t('admin.signedOut'));
  });
}

const LANG_KEY = 'replyd.admin.lang';

/** The language switch in the header: "" follows the browser. Choosing
 * one keeps it in this browser and reloads the page in it. */
function initLanguage() {
  const sel = $('#lang');
  sel.replaceChildren(new Option(t('admin.langBrowser'), ''), ...LANGS.map((code) => {
    const o = new Option(NAMES[code], code);
    o.lang = code;
    return o;
  }));
  sel.value = localStorage.getItem(LANG_KEY) || '';
  sel.addEventListener('change', () => {
    if (sel.value) localStorage.setItem(LANG_KEY, sel.value);
    else localStorage.removeItem(LANG_KEY);
    location.reload();
  });
}

async function init() {
  const lang = await loadCatalog(localStorage.getItem(LANG_KEY) || pick());
  setLocale(lang);
  translate();
  initLanguage();
  initLogin();
  const ctx = { confirm: confirmDialog, setDemoBanner };
  for (const v of Object.values(views)) v.init(ctx);
  onUnauthorized((err) => {
    if (current) signOut(t('admin.signedOutBecause', { reason: errorText(err) }));
  });
  $('#skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    const h1 = document.querySelector('main > .view:not([hidden]) h1');
    (h1 || $('#main')).focus();
  });
  window.addEventListener('hashchange', () => route(true));
  route(false);
  if (auth.header()) checkDemo();
}

init();
