#!/usr/bin/env node
// End-to-end tests of the admin page: the real bin/replyd on demo models, a
// webhook receiver that catches the one-time codes, and headless Chromium
// driven by playwright-core. Walks sign-in, keys, the prompt, Try it, logs and
// stats the way an admin would, checks keyboard access, labels and contrast,
// runs axe-core on every view, checks the phone layout (390x844: no table or
// chart that runs out of its box), and writes screenshots to artifacts/. Ends with "browser: N passed, M failed"
// and a non-zero exit status on any failure.
//
// Environment: REPLYD_BIN (default ../../bin/replyd), CHROMIUM (default
// /usr/bin/chromium), REPLYD_TESTDATA (the shared test data, for jfk.wav).
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { begin, check, chromiumArgs, equal, exitWith, freePort, poll, startReplyd as startProcess, Steps } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const bin = path.resolve(process.env.REPLYD_BIN || path.join(root, 'bin/replyd'));
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const artifacts = path.join(here, 'artifacts');
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };
const axeSource = fs.readFileSync(path.join(here, 'node_modules/axe-core/axe.min.js'), 'utf8');

// ---------------------------------------------------------------- harness

let page;
const steps = new Steps(shot);
const step = (name, fn) => steps.step(name, fn);

async function shot(name) {
  if (!page) return;
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
}

/** Polls fn until it returns a truthy value or the time is up. */
const until = (fn, what, timeoutMs = 15000) => poll(fn, what, timeoutMs, 100);

// ---------------------------------------------------------------- processes

/** A webhook receiver standing in for the messaging channel. */
async function startWebhook() {
  const messages = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      let json = null;
      try { json = JSON.parse(body); } catch { /* recorded as null */ }
      messages.push({ method: req.method, type: req.headers['content-type'] || '', json });
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  const port = await freePort();
  await new Promise((r) => server.listen(port, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${port}/otp`, messages, close: () => new Promise((r) => server.close(r)) };
}

const startReplyd = (env, logFile) => startProcess(bin, env, logFile);

/** The speech clip for Try it: jfk.wav from the shared test data, or espeak-ng. */
function speechFile(tmp) {
  const dirs = [process.env.REPLYD_TESTDATA, path.resolve(root, '../shared/testdata')].filter(Boolean);
  for (const d of dirs) {
    const f = path.join(d, 'whisper/audio/jfk.wav');
    if (fs.existsSync(f)) return f;
  }
  const f = path.join(tmp, 'speech.wav');
  execFileSync('espeak-ng', ['-v', 'en-us', '-w', f, 'Good morning. Would you like some tea or a glass of water?']);
  return f;
}

// ---------------------------------------------------------------- page checks

/** Every form control on the page, shown or not, has a non-empty accessible label. */
async function checkLabels(where) {
  const bad = await page.evaluate(() => {
    const name = (el) => {
      const by = el.getAttribute('aria-labelledby');
      if (by) return by.split(/\s+/).map((id) => document.getElementById(id)?.textContent || '').join(' ').trim();
      if (el.getAttribute('aria-label')) return el.getAttribute('aria-label').trim();
      if (el.labels && el.labels.length) return [...el.labels].map((l) => l.textContent).join(' ').trim();
      if (el.tagName === 'BUTTON') return el.textContent.trim();
      return '';
    };
    const out = [];
    for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea, button')) {
      if (!name(el)) out.push(el.outerHTML.slice(0, 120));
    }
    if (!document.documentElement.lang) out.push('<html> has no lang');
    for (const svg of document.querySelectorAll('svg[role=img]')) if (!svg.getAttribute('aria-label')) out.push('chart without aria-label');
    return out;
  });
  check(bad.length === 0, `${where}: controls without a label:\n${bad.join('\n')}`);
}

/** Text contrast of every visible text element against its background: WCAG AA. */
async function checkContrast(where) {
  const bad = await page.evaluate(() => {
    const parse = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      if (!m) return null;
      const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
      return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
    };
    const lum = ({ r, g, b }) => {
      const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const bgOf = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c.a > 0.9) return c;
      }
      return { r: 255, g: 255, b: 255, a: 1 };
    };
    const out = [];
    for (const el of document.querySelectorAll('body *')) {
      if (!el.getClientRects().length || el.closest('[hidden]') || el.closest('svg')) continue;
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own || el.closest(':disabled') || el.closest('option')) continue;
      const cs = getComputedStyle(el);
      if (cs.visibility === 'hidden' || cs.opacity === '0') continue;
      const fg = parse(cs.color);
      const bg = bgOf(el);
      const l1 = lum(fg), l2 = lum(bg);
      const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
      const size = parseFloat(cs.fontSize);
      const large = size >= 24 || (size >= 18.66 && Number(cs.fontWeight) >= 700);
      if (ratio < (large ? 3 : 4.5)) out.push(`${ratio.toFixed(2)}:1 "${el.textContent.trim().slice(0, 40)}" (${el.tagName.toLowerCase()}.${el.className})`);
    }
    return out;
  });
  check(bad.length === 0, `${where}: text below WCAG AA contrast:\n${bad.join('\n')}`);
}

/**
 * Runs axe-core (WCAG 2.x A and AA rules plus best practices) on the page as
 * it is and fails on any violation. axe is injected through the DevTools
 * protocol, so the page's own CSP stays as strict as it is.
 */
async function checkAxe(where) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => `${v.id} (${v.impact}): ${v.help}\n        ${v.nodes.map((n) => n.target.join(' ')).slice(0, 5).join('\n        ')}`);
  });
  check(violations.length === 0, `${where}: axe-core violations:\n${violations.join('\n')}`);
}

/**
 * Phone layout: nothing inside the page scrolls sideways (a table that
 * does is as bad as a page that does), and the charts' axis labels neither
 * overlap nor leave the chart.
 */
async function checkPhoneLayout(where) {
  const bad = await page.evaluate(() => {
    const out = [];
    for (const el of document.querySelectorAll('main .table-wrap')) {
      if (!el.getClientRects().length) continue;
      const over = el.scrollWidth - el.clientWidth;
      if (over > 1) out.push(`${el.querySelector('table')?.id || 'a table'} scrolls ${over}px sideways`);
    }
    for (const svg of document.querySelectorAll('main .chart svg')) {
      if (!svg.getClientRects().length) continue;
      const box = svg.getBoundingClientRect();
      // The x axis's labels are the bottom row of tick texts.
      const ticks = [...svg.querySelectorAll('text.tick')];
      const bottom = Math.max(...ticks.map((t) => Number(t.getAttribute('y'))));
      const labels = ticks.filter((t) => Number(t.getAttribute('y')) === bottom).map((t) => t.getBoundingClientRect());
      labels.forEach((a, i) => {
        if (a.left < box.left - 0.5 || a.right > box.right + 0.5) out.push(`${svg.parentElement.id}: an axis label leaves the chart`);
        for (const b of labels.slice(i + 1)) {
          if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) out.push(`${svg.parentElement.id}: axis labels overlap`);
        }
      });
    }
    return out;
  });
  check(bad.length === 0, `${where}: ${bad.join('; ')}`);
}

// The request each view makes to fill itself.
const viewData = {
  status: '/v1/admin/status', keys: '/v1/admin/keys', prompt: '/v1/admin/system-prompt/history',
  logs: '/v1/admin/logs', stats: '/v1/admin/stats', try: '/v1/admin/keys', users: '/v1/admin/users',
  models: '/v1/admin/models',
};

/** Waits for the next answer to path (and query) and for the page to draw it. */
async function answered(path, query, action) {
  const [resp] = await Promise.all([
    page.waitForResponse((r) => {
      const u = new URL(r.url());
      return u.pathname === path && Object.entries(query || {}).every(([k, v]) => (u.searchParams.get(k) || '') === v);
    }),
    action(),
  ]);
  await resp.finished();
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return resp;
}

/** Opens a view from the navigation and waits until its data is drawn. */
async function go(view) {
  await answered(viewData[view], null, () => page.click(`#nav a[href="#/${view}"]`));
  check(await page.isVisible(`#view-${view}`), `the ${view} view is not shown`);
}

async function apiJSON(base, method, p, headers = {}, body) {
  const r = await fetch(base + p, {
    method,
    headers: { ...(body ? { 'Content-Type': 'application/json' } : {}), ...headers },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

/** Runs action and returns the multipart body of the POST to /v1/admin/try it makes. */
async function tryBody(action) {
  let posted = null;
  await page.route('**/v1/admin/try', (route) => {
    posted = route.request().postDataBuffer();
    return route.continue();
  });
  await action();
  await until(() => posted, 'the POST to /v1/admin/try');
  await page.unroute('**/v1/admin/try');
  return posted.toString('latin1');
}

/** The RFC 6238 code (HMAC-SHA-1, 6 digits, 30 s steps) of a base32 secret at time t: what an authenticator app shows. */
function totpCode(secret, t = Date.now()) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const ch of secret.replace(/[\s=]/g, '').toUpperCase()) {
    const v = alphabet.indexOf(ch);
    check(v >= 0, `"${ch}" is not base32`);
    bits += v.toString(2).padStart(5, '0');
  }
  const key = Buffer.from(bits.match(/.{8}/g).map((b) => parseInt(b, 2)));
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(t / 30000)));
  const mac = crypto.createHmac('sha1', key).update(counter).digest();
  const off = mac[mac.length - 1] & 0xf;
  return String((mac.readUInt32BE(off) & 0x7fffffff) % 1000000).padStart(6, '0');
}

/** A text-only inference with a client key, straight to /v1/infer. */
async function inferStatus(base, key) {
  const fd = new FormData();
  fd.append('payload', JSON.stringify({ messages: [{ role: 'speaker', content: 'Are you warm enough?' }] }));
  const r = await fetch(`${base}/v1/infer`, { method: 'POST', headers: { 'X-API-KEY': key }, body: fd });
  await r.arrayBuffer();
  return r.status;
}

// ---------------------------------------------------------------- main

async function main() {
  const run = begin('browser', steps, bin, chromiumPath, artifacts);
  if (!run) return 1;
  const { tmp, cleanups, llm, whisper } = run;
  try {

    const hook = await startWebhook();
    cleanups.push(hook.close);
    const adminKey = crypto.randomBytes(24).toString('base64url');
    // Live listening needs the voice detector: the keys view switches it per key.
    const vadModel = path.join(root, 'models', 'silero_vad_v5.onnx');
    check(fs.existsSync(vadModel), `${vadModel} is missing: run scripts/deps.sh (or make vad-model)`);
    const replyd = await startReplyd({
      REPLYD_ADDR: `127.0.0.1:${await freePort()}`,
      REPLYD_DATA_DIR: path.join(tmp, 'data'),
      REPLYD_ADMIN_KEY: adminKey,
      REPLYD_LLM_MODEL: llm,
      REPLYD_WHISPER_MODEL: whisper,
      REPLYD_OTP_CHANNEL: 'webhook',
      REPLYD_OTP_WEBHOOK_URL: hook.url,
      REPLYD_OTP_RESEND_INTERVAL: '3s',
      REPLYD_VAD_MODEL: vadModel,
    }, path.join(artifacts, 'replyd.log'));
    cleanups.push(replyd.stop);
    const base = replyd.base;
    const audioFile = speechFile(tmp);

    const context = await chromium.launchPersistentContext(path.join(tmp, 'chromium-profile'), {
      executablePath: chromiumPath,
      headless: true,
      args: chromiumArgs, // its fake microphone (a tone) is for the recording test
      viewport: DESKTOP,
      permissions: ['clipboard-read', 'clipboard-write', 'microphone'],
      timeout: 60000,
    });
    cleanups.push(() => context.close());
    page = context.pages()[0] || (await context.newPage());
    page.setDefaultTimeout(15000);
    const problems = [];
    page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error' && /Content.Security.Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
    });
    const offsite = [];
    page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('blob:') && !r.url().startsWith('data:')) offsite.push(r.url()); });
    const session = () => page.evaluate(() => ({ ...sessionStorage }));

    let token = '';
    let statsBefore = 0;
    let revokeKey = null; // {key, hash}
    let tryHash = '';
    const nonce = crypto.randomBytes(4).toString('hex');

    await step('/ redirects to /admin/, which loads under a self-only CSP', async () => {
      const resp = await page.goto(`${base}/`);
      check(new URL(page.url()).pathname === '/admin/', `landed on ${page.url()}`);
      const csp = (await resp.allHeaders())['content-security-policy'] || '';
      check(/default-src 'self'/.test(csp), `/admin/ has no "default-src 'self'" CSP header (got "${csp}")`);
      await until(() => page.isVisible('#view-login'), 'the sign-in view');
      equal(await page.textContent('#login-h'), 'Sign in', 'heading');
      check(await page.isHidden('#nav'), 'navigation shown before sign-in');
      await shot('01-login-desktop');
    });

    await step('Tab reaches every sign-in control in order', async () => {
      await page.evaluate(() => document.activeElement && document.activeElement.blur());
      const seen = [];
      for (let i = 0; i < 12; i++) {
        await page.keyboard.press('Tab');
        seen.push(await page.evaluate(() => document.activeElement.id || document.activeElement.tagName));
      }
      equal(seen[0], 'skip', 'first Tab stop');
      const want = ['otp-send', 'otp-code', 'otp-verify', 'admin-key', 'key-login'];
      const idx = want.map((id) => seen.indexOf(id));
      check(idx.every((i) => i >= 0), `Tab stops ${seen.join(', ')} miss one of ${want.join(', ')}`);
      check(idx.every((v, i) => i === 0 || v > idx[i - 1]), `Tab order ${seen.join(', ')}`);
      // The focused control shows a visible focus ring.
      await page.focus('#otp-send');
      await page.keyboard.press('Shift+Tab');
      await page.keyboard.press('Tab');
      const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
      check(outline !== 'none', 'no focus outline on the Send code button');
    });

    await step('sign-in view: every control has a label, text has AA contrast, axe finds nothing', async () => {
      await checkLabels('sign-in');
      await checkContrast('sign-in');
      await checkAxe('sign-in');
    });

    await step('a wrong admin key is refused with replyd\'s message', async () => {
      await page.fill('#admin-key', 'not-the-admin-key');
      await page.keyboard.press('Enter');
      const msg = await until(async () => (await page.textContent('#login-error')).trim(), 'an error message');
      check(msg.length > 3, `error message "${msg}"`);
      check(await page.isVisible('#view-login'), 'left the sign-in view');
      equal(JSON.stringify(await session()), '{}', 'session storage after a wrong key');
    });

    await step('the admin key signs in; Log out signs out', async () => {
      await page.fill('#admin-key', adminKey);
      await page.click('#key-login');
      await until(() => page.isVisible('#view-status'), 'the status view');
      check(await page.isVisible('#nav'), 'navigation hidden after sign-in');
      equal((await session())['replyd.admin_key'], adminKey, 'stored admin key');
      await page.click('#logout');
      await until(() => page.isVisible('#view-login'), 'the sign-in view');
      equal(JSON.stringify(await session()), '{}', 'session storage after log out');
    });

    await step('OTP: the code arrives at the webhook, a wrong code is refused, the right one signs in', async () => {
      await page.click('#otp-send');
      const sent = await until(async () => (await page.textContent('#otp-sent')).trim(), 'the "code sent" note');
      check(/sent/i.test(sent), `note "${sent}"`);
      const msg = await until(() => hook.messages.find((m) => m.json && m.json.code), 'a code at the webhook', 15000);
      equal(msg.method, 'POST', 'webhook method');
      check(/application\/json/.test(msg.type), `webhook content type ${msg.type}`);
      const code = String(msg.json.code);
      check(/^\d{4,10}$/.test(code), `code "${code}"`);
      check(String(msg.json.text || '').includes(code), 'webhook text does not contain the code');
      check(msg.json.expires_at && !Number.isNaN(Date.parse(msg.json.expires_at)), 'webhook expires_at');
      check(await page.evaluate(() => document.activeElement.id) === 'otp-code', 'focus did not move to the code field');

      // A second code right away is rate limited; the page shows why.
      await page.click('#otp-send');
      const limited = await until(async () => (await page.textContent('#login-error')).trim(), 'the rate-limit message');
      check(limited.length > 3, `rate-limit message "${limited}"`);
      equal(hook.messages.length, 1, 'webhook messages after a second send');

      const wrong = code === '000000' ? '111111' : '000000';
      await page.fill('#otp-code', wrong);
      await page.click('#otp-verify');
      await until(async () => /code/i.test(await page.textContent('#login-error')), 'the wrong-code message');
      check(await page.isVisible('#view-login'), 'a wrong code signed in');

      await page.fill('#otp-code', code);
      await page.keyboard.press('Enter');
      await until(() => page.isVisible('#view-status'), 'the status view');
      token = (await session())['replyd.session'];
      check(token && token.length >= 16, 'no session token in sessionStorage');
      equal((await context.cookies()).length, 0, 'cookies set');
    });

    await step('status: version, uptime, queue, data file, models loaded, demo warning', async () => {
      await until(async () => (await page.$$('#engines tbody tr')).length >= 2, 'two engines');
      const facts = await page.$$eval('#status-facts > div', (ds) => Object.fromEntries(ds.map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent])));
      for (const k of ['Version', 'Box', 'Uptime', 'Queue depth', 'Data file']) check(facts[k] && facts[k] !== '–', `fact ${k} = ${facts[k]}`);
      check(/\d/.test(facts['Data file']), `data file size "${facts['Data file']}"`);
      equal(facts['Live listening'], 'on', 'live listening on the box (REPLYD_LIVE unset, the voice detector loaded)');
      check(/^\d+ \((affinity|host|configured|cgroup .+)\)$/.test(facts['CPU cores']), `CPU cores "${facts['CPU cores']}"`);
      check(/^OpenBLAS \w+/.test(facts['Kernels']) && /ggml: .*AVX|ggml: .*NEON|ggml: \S/.test(facts['Kernels']), `kernels "${facts['Kernels']}"`);
      const rows = await page.$$eval('#engines tbody tr', (trs) => trs.map((tr) => tr.textContent));
      for (const r of rows) {
        check(/Loaded/.test(r), `engine not loaded: ${r}`);
        check(/Demo model/.test(r), `engine not marked demo: ${r}`);
      }
      check(rows.some((r) => r.includes('llm-demo.gguf')) && rows.some((r) => r.includes('whisper-demo.bin')), `model files: ${rows.join(' | ')}`);
      check(await page.isVisible('#demo-banner'), 'no demo-model warning');
      await checkLabels('status');
      await checkContrast('status');
      await checkAxe('status');
      await shot('02-status-desktop');
    });

    await step('status: the backup button downloads a consistent copy of the data file', async () => {
      const [download] = await Promise.all([page.waitForEvent('download'), page.click('#backup-download')]);
      check(/^replyd-backup-\d{8}T\d{6}Z\.db$/.test(download.suggestedFilename()), `file name ${download.suggestedFilename()}`);
      const file = await download.path();
      const b = fs.readFileSync(file);
      // bbolt's meta page: the magic 0xED0CDAED at offset 16, little-endian.
      check(b.length >= 8192 && b.readUInt32LE(16) === 0xED0CDAED, `the download (${b.length} bytes) is not a bbolt file`);
      await until(async () => /Downloaded/.test(await page.textContent('#backup-msg')), 'the "downloaded" note');
    });

    await step('sign-in methods: an authenticator app is set up once from Status, its QR code and secret shown only then, and its code signs in', async () => {
      const methods = async () => page.$$eval('#signin-facts > div', (ds) => Object.fromEntries(ds.map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent])));
      equal((await methods())['Authenticator app'], 'not set up', 'before enrolment');
      equal((await methods())['Codes sent'], 'through webhook', 'the code channel');
      // Signed in with a session: setting one up asks for a code sent now
      // (a session alone cannot enroll).
      await page.click('#totp-enroll');
      await until(() => page.isVisible('#totp-confirm'), 'the code confirmation');
      const sentCodes = () => hook.messages.filter((m) => m.json && m.json.code);
      await until(async () => (await page.textContent('#totp-sent')).trim() || (await page.textContent('#signin-error')).trim(), 'the code note');
      if (sentCodes().length < 2) {
        // The resend interval since the sign-in code had not passed yet.
        await new Promise((r) => setTimeout(r, 3500));
        await page.click('#totp-resend');
      }
      const confirmCode = await until(() => sentCodes()[1], 'a second code at the webhook', 15000);
      await page.fill('#totp-code', String(confirmCode.json.code));
      await answered('/v1/admin/totp/enroll', null, () => page.click('#totp-confirm-submit'));
      await until(() => page.isVisible('#totp-new'), 'the new secret panel');
      check(await page.isHidden('#totp-confirm'), 'the code confirmation stays after enrolment');
      equal(await page.evaluate(() => document.activeElement.id), 'totp-new', 'focus after enrolment');
      check(/will not be shown again/.test(await page.textContent('#totp-new')), 'no "will not be shown again" warning');
      const secret = (await page.textContent('#totp-secret')).trim();
      check(/^([A-Z2-7]{4} ){7}[A-Z2-7]{4}$/.test(secret), `secret "${secret}"`);
      // The QR code is an inline <svg> (no image request, no CSP exception) with a name.
      const qr = await page.$eval('#totp-qr > svg', (svg) => ({ label: svg.getAttribute('aria-label'), role: svg.getAttribute('role'),
        modules: (svg.querySelector('path')?.getAttribute('d') || '').length, width: svg.getBoundingClientRect().width }));
      check(qr.role === 'img' && /QR code/.test(qr.label || '') && qr.modules > 100 && qr.width >= 200, `QR code ${JSON.stringify(qr)}`);
      equal((await methods())['Authenticator app'], 'set up', 'after enrolment');
      await checkLabels('status with a new authenticator secret');
      await checkContrast('status with a new authenticator secret');
      await checkAxe('status with a new authenticator secret');
      await shot('03-signin-methods-totp-desktop');

      // Leaving the view removes the secret; back on Status it is not shown again.
      await go('keys');
      await go('status');
      check(await page.isHidden('#totp-new'), 'the secret panel is shown again');
      equal((await page.textContent('#totp-secret')).trim(), '', 'secret left in the page');
      check((await page.$$('#totp-qr svg')).length === 0, 'QR code left in the page');
      equal((await page.textContent('#totp-enroll')).trim(), 'Replace authenticator app', 'the button once enrolled');
      // Replacing asks first; Escape keeps the app that is set up.
      await page.click('#totp-enroll');
      await until(() => page.isVisible('#confirm'), 'the replace question');
      await page.keyboard.press('Escape');
      await until(() => page.isHidden('#confirm'), 'the dialog to close');
      check(await page.isHidden('#totp-new'), 'a cancelled replacement enrolled anyway');

      // The app's code (computed here from the secret shown) signs in.
      await page.click('#logout');
      await until(() => page.isVisible('#view-login'), 'the sign-in view');
      await page.fill('#otp-code', totpCode(secret));
      await page.keyboard.press('Enter');
      await until(() => page.isVisible('#view-status'), 'the status view after signing in with the app\'s code');
      token = (await session())['replyd.session'];
      check(token && token.length >= 16, 'no session token after the authenticator sign-in');
    });

    await step('keyboard: the navigation opens a view and moves focus to its heading; the skip link works', async () => {
      await page.focus('#nav a[href="#/keys"]');
      await answered('/v1/admin/keys', null, () => page.keyboard.press('Enter'));
      check(await page.isVisible('#view-keys'), 'Enter on "Keys" did not open the keys view');
      equal(await page.evaluate(() => document.activeElement.id), 'keys-h', 'focus after opening a view');
      equal(await page.getAttribute('#nav a[href="#/keys"]', 'aria-current'), 'page', 'aria-current on the open view');
      await page.keyboard.press('Tab');
      equal(await page.evaluate(() => document.activeElement.id), 'kc-client', 'first control after the heading');
      await page.focus('#skip');
      await page.keyboard.press('Enter');
      equal(await page.evaluate(() => document.activeElement.id), 'keys-h', 'focus after the skip link');
    });

    await step('stats: read the totals before any inference', async () => {
      await go('stats');
      const t = await until(async () => {
        const s = (await page.textContent('#stats-total')).trim();
        return s !== '–' && s;
      }, 'the request total');
      statsBefore = Number(t.replace(/\D/g, ''));
      check(Number.isFinite(statsBefore), `total "${t}"`);
    });

    await step('keys: create a key, see it once, copy it, and it works', async () => {
      await go('keys');
      await page.fill('#kc-client', `e2e-revoke-${nonce}`);
      await page.fill('#kc-scopes', 'infer');
      await page.fill('#kc-rate', '30');
      await page.click('#kc-submit');
      await until(() => page.isVisible('#key-created'), 'the new key panel');
      const key = await page.inputValue('#key-created-value');
      check(/^\S{20,}$/.test(key), `key "${key}"`);
      check((await page.textContent('#key-created')).includes('only this once'), 'no "shown once" warning');
      const row = page.locator(`#keys-table tr[data-client="e2e-revoke-${nonce}"]`);
      await until(async () => (await row.count()) === 1, 'the key in the list');
      const hash = await row.getAttribute('data-hash');
      equal(hash, crypto.createHash('sha256').update(key).digest('hex'), 'listed hash vs SHA-256 of the shown key');
      check(/active/.test(await row.textContent()), 'new key not active');
      check(/30/.test(await row.textContent()) && /infer/.test(await row.textContent()), `row ${await row.textContent()}`);
      await page.click('#key-copy');
      await until(async () => /Copied/.test(await page.textContent('#key-copy-msg')), 'the "copied" note');
      equal(await page.evaluate(() => navigator.clipboard.readText()), key, 'clipboard');
      equal(await inferStatus(base, key), 200, '/v1/infer status with the new key');
      revokeKey = { key, hash };
      await checkLabels('keys');
      await checkContrast('keys');
      await checkAxe('keys');
      await shot('03-keys-created-desktop');
      // The key was just used: its row says when.
      await answered('/v1/admin/keys', null, () => page.click('#keys-refresh'));
      const used = await row.locator('td[data-label="Last used"]').textContent();
      check(/\d/.test(used), `"Last used" of a key just used: "${used}"`);
    });

    await step('keys: live listening is switched off and on again per key, as the API says; axe finds nothing either way', async () => {
      const row = page.locator(`#keys-table tr[data-hash="${revokeKey.hash}"]`);
      const sw = row.locator('input[role="switch"]');
      const listed = async () => {
        const list = await apiJSON(base, 'GET', '/v1/admin/keys', { 'X-ADMIN-SESSION': token });
        equal(list.status, 200, 'GET /v1/admin/keys');
        return list.json.items.find((k) => k.APIKeyHash === revokeKey.hash)?.LiveListening;
      };
      const ticket = async () => {
        const r = await fetch(`${base}/v1/live/ticket`, { method: 'POST', headers: { 'X-API-KEY': revokeKey.key } });
        await r.arrayBuffer();
        return r.status;
      };
      if (await page.isVisible('#key-created')) await page.click('#key-created-done');
      equal(await listed(), true, 'LiveListening of a new key');
      check(await sw.isChecked(), 'the live switch of a new key is off');
      equal(await sw.getAttribute('aria-label'), `Live listening for e2e-revoke-${nonce}`, "the switch's accessible name");
      equal((await row.locator('td[data-label="Live listening"]').textContent()).trim(), 'on', 'the state beside the switch');

      await answered('/v1/admin/keys', null, () => sw.click());
      await until(async () => /Live listening is off for/.test(await page.textContent('#keys-msg')), 'the "switched off" note');
      check(!(await sw.isChecked()), 'the switch after switching off');
      equal((await row.locator('td[data-label="Live listening"]').textContent()).trim(), 'off', 'the state beside the switch after switching off');
      equal(await listed(), false, 'LiveListening after switching off');
      equal(await ticket(), 403, 'a live ticket for the key switched off');
      await checkLabels('keys, live listening off');
      await checkContrast('keys, live listening off');
      await checkAxe('keys, live listening off');
      await shot('03b-keys-live-off-desktop');

      // The keyboard switches it back on (Space on a focused switch).
      await sw.focus();
      await answered('/v1/admin/keys', null, () => page.keyboard.press('Space'));
      await until(async () => /Live listening is on for/.test(await page.textContent('#keys-msg')), 'the "switched on" note');
      check(await sw.isChecked(), 'the switch after switching on again');
      equal(await listed(), true, 'LiveListening after switching on again');
      equal(await ticket(), 201, 'a live ticket for the key switched on again');
      await checkAxe('keys, live listening on again');
    });

    await step('keys: a second key with the same client name is created with a warning', async () => {
      if (await page.isVisible('#key-created')) await page.click('#key-created-done');
      for (let i = 0; i < 2; i++) {
        await page.fill('#kc-client', `e2e-dup-${nonce}`);
        await answered('/v1/admin/keys', null, () => page.click('#kc-submit'));
        await until(() => page.isVisible('#key-created'), 'the new key panel');
        const warn = (await page.textContent('#key-created-warnings')).trim();
        if (i === 0) equal(warn, '', 'warning for a new name');
        else check(/already the name of another active key/.test(warn), `warning "${warn}"`);
        await page.click('#key-created-done');
      }
      equal(await page.locator(`#keys-table tr[data-client="e2e-dup-${nonce}"] td[data-label="Last used"]`).first().textContent(), 'never', 'Last used of an unused key');
    });

    await step('keys: after a reload the key is never shown again', async () => {
      await page.reload();
      await until(() => page.isVisible('#view-keys'), 'the keys view after reload');
      await until(async () => (await page.locator(`#keys-table tr[data-hash="${revokeKey.hash}"]`).count()) === 1, 'the key in the list');
      check(await page.isHidden('#key-created'), 'new-key panel visible after reload');
      check(!(await page.content()).includes(revokeKey.key), 'the key appears in the page after reload');
      const list = await apiJSON(base, 'GET', '/v1/admin/keys?include_revoked=true', { 'X-ADMIN-SESSION': token });
      equal(list.status, 200, 'GET /v1/admin/keys');
      check(!list.text.includes(revokeKey.key), 'the key appears in the key list JSON');
    });

    await step('keys: revoke asks first (Escape cancels), then marks the key revoked', async () => {
      const sel = `#keys-table tr[data-hash="${revokeKey.hash}"] button`;
      await page.click(sel);
      await until(() => page.isVisible('#confirm'), 'the confirmation dialog');
      check((await page.textContent('#confirm-text')).includes(`e2e-revoke-${nonce}`), 'dialog does not name the client');
      equal(await page.evaluate(() => document.activeElement.id), 'confirm-cancel', 'focus in the dialog');
      await shot('04-keys-revoke-dialog-desktop');
      await page.keyboard.press('Escape');
      await until(() => page.isHidden('#confirm'), 'the dialog to close');
      equal(await page.evaluate(() => document.activeElement.textContent), 'Revoke', 'focus back on the Revoke button');
      check(/active/.test(await page.textContent(`#keys-table tr[data-hash="${revokeKey.hash}"]`)), 'Escape revoked the key');
      equal(await inferStatus(base, revokeKey.key), 200, 'key works after a cancelled revoke');

      await page.click(sel);
      await page.click('#confirm-ok');
      await until(async () => /revoked/.test(await page.textContent('#keys-msg')), 'the "revoked" note');
      await until(async () => (await page.locator(`#keys-table tr[data-hash="${revokeKey.hash}"]`).count()) === 0, 'the key to leave the active list');
      await page.check('#keys-revoked');
      const row = page.locator(`#keys-table tr[data-hash="${revokeKey.hash}"]`);
      await until(async () => (await row.count()) === 1, 'the revoked key with "Include revoked"');
      const text = await row.textContent();
      check(/revoked/.test(text) && !/active/.test(text), `row "${text}"`);
      equal(await row.locator('button').count(), 0, 'a revoked key still has a Revoke button');
      equal(await inferStatus(base, revokeKey.key), 401, '/v1/infer status with the revoked key');
      await shot('05-keys-revoked-desktop');
      await page.uncheck('#keys-revoked');
    });

    await step('prompt: save two new versions, then restore the first', async () => {
      await go('prompt');
      const v0 = (await page.textContent('#prompt-version')).trim();
      const textA = `You suggest short, kind replies for an AAC user. (e2e A ${nonce})`;
      const textB = `Offer three brief answers in the user's own voice. (e2e B ${nonce})`;
      const saveAs = async (text) => {
        const before = (await page.textContent('#prompt-version')).trim();
        await page.fill('#prompt-text', text);
        await page.click('#prompt-save');
        await until(async () => /Saved as version/.test(await page.textContent('#prompt-msg')) && (await page.textContent('#prompt-version')).trim() !== before, 'the saved note');
        return (await page.textContent('#prompt-version')).trim();
      };
      const vA = await saveAs(textA);
      const vB = await saveAs(textB);
      if (/^\d+$/.test(v0)) equal(Number(vA), Number(v0) + 1, 'version after the first save');
      equal(Number(vB), Number(vA) + 1, 'version after the second save');
      equal(await page.inputValue('#prompt-text'), textB, 'editor text');
      const hist = await page.$$eval('#prompt-history li', (lis) => lis.map((li) => li.dataset.version));
      check(hist.includes(vA) && hist.includes(vB), `history ${hist.join(',')}`);
      // An old version can be read before it is restored: its first words
      // show in the list, and Restore shows the whole text and asks first.
      check((await page.textContent(`#prompt-history li[data-version="${vA}"] summary`)).includes(textA.slice(0, 30)), 'no preview of the old text');
      await page.click(`#prompt-history li[data-version="${vA}"] button`);
      await until(() => page.isVisible('#confirm'), 'the restore dialog');
      equal((await page.textContent('#confirm-detail')).trim(), textA, 'the text shown before restoring');
      await checkAxe('prompt restore dialog');
      await page.keyboard.press('Escape');
      await until(() => page.isHidden('#confirm'), 'the dialog to close');
      equal((await page.textContent('#prompt-version')).trim(), vB, 'version after a cancelled restore');
      await page.click(`#prompt-history li[data-version="${vA}"] button`);
      await page.click('#confirm-ok');
      await until(async () => /restored/.test(await page.textContent('#prompt-msg')), 'the restored note');
      const vC = (await page.textContent('#prompt-version')).trim();
      equal(Number(vC), Number(vB) + 1, 'version after restore');
      equal(await page.inputValue('#prompt-text'), textA, 'editor text after restore');
      const cur = await apiJSON(base, 'GET', '/v1/admin/system-prompt', { 'X-ADMIN-SESSION': token });
      equal(cur.json && cur.json.prompt, textA, 'GET /v1/admin/system-prompt after restore');
      equal(cur.json && String(cur.json.version), vC, 'served version');
      await page.click(`#prompt-history li[data-version="${vA}"] summary`);
      await checkLabels('prompt');
      await checkContrast('prompt');
      await checkAxe('prompt');
      await shot('06-prompt-desktop');
    });

    await step('Try it: an uploaded audio file gives a transcript, candidates and stage timings', async () => {
      await go('keys');
      await page.fill('#kc-client', `e2e-try-${nonce}`);
      await page.click('#kc-submit');
      await until(() => page.isVisible('#key-created'), 'the new key panel');
      await page.click('#key-created-done');
      check(await page.isHidden('#key-created'), 'Done did not hide the key');
      await go('try');
      const opt = page.locator('#try-key option', { hasText: `e2e-try-${nonce}` });
      await until(async () => (await opt.count()) === 1, 'the key in the picker');
      equal(await page.locator('#try-key option', { hasText: `e2e-revoke-${nonce}` }).count(), 0, 'revoked key offered in the picker');
      tryHash = await opt.getAttribute('value');
      await page.selectOption('#try-key', tryHash);
      await page.setInputFiles('#try-file', audioFile);
      await until(async () => (await page.textContent('#try-audio-info')).startsWith(path.basename(audioFile)), 'the chosen file named');
      const body = await tryBody(() => page.click('#try-run'));
      await until(() => page.isVisible('#try-result'), 'the result', 180000);
      check(body.includes(`filename="${path.basename(audioFile)}"`), 'the audio part is missing');
      check(body.includes('"audio":true') && body.includes(tryHash), 'payload lacks audio:true or the key hash');
      check(await page.isVisible('#try-transcript'), 'no transcript field');
      const transcript = (await page.textContent('#try-transcript')).trim();
      check(transcript.length > 0 && transcript !== '(no audio sent)', `transcript "${transcript}"`);
      const cands = await page.$$eval('#try-candidates li:not(.empty)', (lis) => lis.map((li) => li.textContent.trim()));
      check(cands.length >= 1 && cands.every((c) => c.length > 0), `candidates ${JSON.stringify(cands)}`);
      const timings = await page.$$eval('#try-timings tbody tr', (trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.stage, Number(tr.querySelector('td').textContent.replace(/\D/g, ''))])));
      for (const k of ['decode', 'stt', 'generation', 'total']) check(Number.isFinite(timings[k]), `timing ${k}: ${JSON.stringify(timings)}`);
      check(timings.total >= timings.stt && timings.total >= timings.generation && timings.total > 0, `timings ${JSON.stringify(timings)}`);
      equal(await page.textContent('#try-error'), '', 'error shown');
      await checkLabels('try');
      await checkContrast('try');
      await checkAxe('try');
      await shot('07-try-desktop');
    });

    await step('Try it: a recording from the microphone is sent as webm/opus and answered', async () => {
      await page.click('#try-audio-clear');
      check(await page.isHidden('#try-audio-row'), 'Remove audio left the file');
      await page.click('#try-rec');
      await until(async () => /Recording/.test(await page.textContent('#try-rec-state')), 'the recording state');
      equal(await page.evaluate(() => document.activeElement.id), 'try-stop', 'focus while recording');
      await page.waitForTimeout(2500);
      await page.click('#try-stop');
      await until(async () => (await page.textContent('#try-audio-info')).startsWith('recording.webm'), 'the recording named');
      const before = await page.textContent('#try-timings');
      const body = await tryBody(() => page.click('#try-run'));
      check(/filename="recording\.webm"\r\nContent-Type: audio\/webm/.test(body), 'the recording is not sent as audio/webm');
      check(body.includes('OpusHead'), 'the recording is not Opus');
      await until(async () => !(await page.isDisabled('#try-run')), 'the answer', 180000);
      equal(await page.textContent('#try-error'), '', 'error shown');
      check((await page.textContent('#try-timings')) !== before, 'the timings did not change');
      await shot('07-try-recorded-desktop');
    });

    await step('logs: the infer line appears; level and stream filters and auto-refresh work', async () => {
      await go('logs');
      await answered('/v1/admin/logs', { stream: 'infer' }, () => page.selectOption('#logs-stream', 'infer'));
      const ours = page.locator(`#logs-table tbody tr[data-stream="infer"] td[title="${tryHash}"]`);
      await until(async () => (await ours.count()) >= 1, 'an infer line for the Try it key');
      const lineRow = page.locator(`#logs-table tbody tr[data-stream="infer"]:has(td[title="${tryHash}"])`).first();
      const line = await lineRow.textContent();
      check(/ok/.test(line) && /audio/.test(line) && /HTTP 200/.test(line) && /, on \S/.test(line), `infer line "${line}" (with the box that wrote it)`);
      // Every answer with candidates names the language model that made it.
      const answeredLines = (await page.$$eval('#logs-table tbody tr[data-stream="infer"]', (trs) => trs.map((t) => t.textContent)))
        .filter((l) => /\b[1-9]\d* candidates?\b/.test(l));
      check(answeredLines.length > 0, 'no infer line with candidates');
      for (const l of answeredLines) check(/model llm-demo\.gguf/.test(l), `infer line "${l}" does not name the model that answered`);
      equal((await lineRow.locator('td[data-label="Client"]').textContent()).trim(), `e2e-try-${nonce}`, 'client of the infer line');
      const streams = await page.$$eval('#logs-table tbody tr[data-stream]', (trs) => [...new Set(trs.map((t) => t.dataset.stream))]);
      equal(streams.join(','), 'infer', 'streams shown with the infer filter');
      await answered('/v1/admin/logs', { level: 'info', stream: 'infer' }, () => page.selectOption('#logs-level', 'info'));
      const levels = await page.$$eval('#logs-table tbody tr[data-level]', (trs) => [...new Set(trs.map((t) => t.dataset.level))]);
      equal(levels.join(','), 'info', 'levels shown with the info filter');
      await answered('/v1/admin/logs', { level: '' }, () => page.selectOption('#logs-level', ''));
      await answered('/v1/admin/logs', { window: '15m' }, () => page.selectOption('#logs-window', '15m'));
      await until(async () => (await ours.count()) >= 1, 'the line within 15 minutes');
      // "Since a time": a future time (a clock ahead) is an empty list, not an error; an hour ago finds the line.
      const localTime = (offsetMs) => page.evaluate((off) => {
        const d = new Date(Date.now() + off);
        d.setMinutes(d.getMinutes() - d.getTimezoneOffset());
        return d.toISOString().slice(0, 19);
      }, offsetMs);
      await answered('/v1/admin/logs', null, () => page.selectOption('#logs-window', 'since'));
      check(await page.isVisible('#logs-since'), 'no time field for "Since a time"');
      await answered('/v1/admin/logs', null, async () => page.fill('#logs-since', await localTime(3600e3)));
      equal(await page.textContent('#logs-error'), '', 'error for a future time');
      check(/^0 entries/.test(await page.textContent('#logs-meta')), `meta for a future time: ${await page.textContent('#logs-meta')}`);
      const hourAgo = await localTime(-3600e3);
      await answered('/v1/admin/logs', null, () => page.fill('#logs-since', hourAgo));
      equal(await page.textContent('#logs-error'), '', 'error left after a valid time');
      check((await ours.count()) >= 1, 'the line is missing since an hour ago');
      await answered('/v1/admin/logs', { window: '15m' }, () => page.selectOption('#logs-window', '15m'));
      const meta1 = await page.textContent('#logs-meta');
      await page.check('#logs-auto');
      await until(async () => (await page.textContent('#logs-meta')) !== meta1, 'an automatic refresh', 12000);
      await page.uncheck('#logs-auto');
      await checkLabels('logs');
      await checkContrast('logs');
      await checkAxe('logs');
      await shot('08-logs-desktop');
    });

    await step('stats: the request total went up, the charts show it, and the answers are counted per language model', async () => {
      await go('stats');
      await page.click('#stats-refresh');
      const after = await until(async () => {
        const n = Number((await page.textContent('#stats-total')).replace(/\D/g, ''));
        return n > statsBefore && n;
      }, `a total above ${statsBefore}`);
      check(after >= statsBefore + 3, `total ${after}, was ${statsBefore}; three inferences ran since`);
      const users = Number((await page.textContent('#stats-users')).replace(/\D/g, ''));
      check(users >= 1, `active users ${users}`);
      const bars = await page.$$eval('#chart-requests rect.bar', (rs) => rs.map((r) => Number(r.getAttribute('height'))));
      check(bars.some((hgt) => hgt > 0), `request bars ${bars}`);
      const label = await page.getAttribute('#chart-requests svg', 'aria-label');
      check(/Requests per/.test(label), `chart label "${label}"`);
      const modelRow = await page.$$eval('#stats-models tbody tr', (trs) => trs.map((tr) => tr.dataset.model));
      equal(modelRow.join(','), 'llm-demo.gguf', 'the language models that answered, in the Stats view');
      await checkLabels('stats');
      await checkContrast('stats');
      await checkAxe('stats');
      await shot('09-stats-desktop');
    });

    await step('outcomes: feedback shows as acceptance over time, per prompt version, and beside the version in Prompt', async () => {
      const admin = { 'X-ADMIN-KEY': adminKey };
      const created = await apiJSON(base, 'POST', '/v1/admin/keys', admin, { client_id: `e2e-outcomes-${nonce}` });
      equal(created.status, 200, 'create a key for the outcomes');
      const version = String((await apiJSON(base, 'GET', '/v1/admin/system-prompt', admin)).json.version);
      const report = async (outcome) => {
        const fd = new FormData();
        fd.append('payload', JSON.stringify({ messages: [{ role: 'speaker', content: 'Would you like some tea?' }] }));
        const r = await fetch(`${base}/v1/infer`, { method: 'POST', headers: { 'X-API-KEY': created.json.api_key }, body: fd });
        const { inference_id: id } = await r.json();
        check(r.status === 200 && /^inf_/.test(id || ''), `infer: ${r.status} ${id}`);
        const fb = await apiJSON(base, 'POST', '/v1/feedback', { 'X-API-KEY': created.json.api_key }, { inference_id: id, ...outcome });
        equal(fb.status, 200, `feedback ${JSON.stringify(outcome)}: ${fb.text}`);
      };
      await report({ chosen_rank: 1, time_to_choice_ms: 3200 });
      await report({ none_fit: true });

      await answered('/v1/admin/stats', null, () => page.click('#stats-refresh')); // the stats view is open
      await until(async () => (await page.textContent('#stats-acceptance')).trim() === '50%', 'an acceptance of 50%');
      const over = await page.$$eval('#chart-acceptance rect.bar', (rs) => rs.map((r) => Number(r.getAttribute('height'))));
      check(over.length >= 1 && over.some((v) => v > 0), `acceptance bars ${over}`);
      check(/Suggestions spoken per/.test(await page.getAttribute('#chart-acceptance svg', 'aria-label')), 'acceptance chart label');
      const ticks = await page.$$eval('#chart-versions text.tick', (ts) => ts.map((t) => t.textContent));
      check(ticks.includes(`v${version}`) && ticks.includes('100%'), `version chart ticks ${ticks}`);
      const label = await page.getAttribute('#chart-versions svg', 'aria-label');
      check(label.includes(`v${version} 50%`), `version chart label "${label}"`);
      equal((await page.textContent(`#stats-versions tr[data-version="${version}"] td:last-child`)).trim(), '50%', 'acceptance of the version in the table');
      check((await page.textContent('#stats-keys')).includes(`e2e-outcomes-${nonce}`), 'the key in the per-key table');
      check(/2 outcomes reported, 1 spoken from a suggestion, 1 none fit/.test(await page.textContent('#stats-outcomes-meta')), 'outcome summary');
      await checkLabels('stats');
      await checkContrast('stats');
      await checkAxe('stats (outcomes)');
      await shot('10-stats-outcomes-desktop');

      await go('prompt');
      await until(async () => /50% spoken \(2 outcomes\)/.test(await page.textContent(`#prompt-history .acceptance[data-version="${version}"]`)), 'the acceptance beside the version');
      await shot('11-prompt-acceptance-desktop');
    });

    await step('users: a remembered user\'s memory is used by its own tablet only, until the Users view links another', async () => {
      const admin = { 'X-ADMIN-KEY': adminKey };
      const mk = async (name) => {
        const r = await apiJSON(base, 'POST', '/v1/admin/keys', admin, { client_id: `${name}-${nonce}` });
        equal(r.status, 200, `create ${name}`);
        return r.json;
      };
      const tablet = await mk('e2e-bob-tablet');
      const phone = await mk('e2e-bob-phone');
      const remember = async (key, content) => {
        const fd = new FormData();
        fd.append('payload', JSON.stringify({ user_id: `e2e-bob-${nonce}`, remember: true, messages: [{ role: 'speaker', content }] }));
        const r = await fetch(`${base}/v1/infer`, { method: 'POST', headers: { 'X-API-KEY': key }, body: fd });
        const { inference_id: id } = await r.json();
        equal(r.status, 200, 'remembering inference');
        const fb = await apiJSON(base, 'POST', '/v1/feedback', { 'X-API-KEY': key }, { inference_id: id, spoken_text: 'Yes please, with milk.' });
        equal(fb.status, 200, `feedback: ${fb.text}`);
      };
      const pairsOf = async () => (await apiJSON(base, 'GET', '/v1/admin/users', admin)).json.items
        .filter((u) => (u.keys || []).includes(tablet.api_key_hash)).map((u) => u.pairs);
      await remember(tablet.api_key, 'Would you like some tea?');
      // The phone names the same user_id: a memory of its own, not the tablet's.
      await remember(phone.api_key, 'Shall we go out?');
      equal(JSON.stringify(await pairsOf()), '[1]', "the tablet's memory after the phone's feedback");

      await go('users');
      const row = `#users-table tr:has(li span[title="${tablet.api_key_hash}"])`;
      await until(async () => (await page.$$(row)).length === 1, "the tablet's user in the list");
      check((await page.textContent(row)).includes(`e2e-bob-tablet-${nonce}`), 'the tablet named in its row');
      await page.selectOption(`${row} select`, phone.api_key_hash);
      await page.click(`${row} button[data-action="link"]`);
      await until(() => page.isVisible('#confirm'), 'the link question');
      await answered(`/v1/admin/users/${await page.getAttribute(row, 'data-user')}/keys`, null, () => page.click('#confirm-ok'));
      await until(async () => (await page.textContent(row)).includes(`e2e-bob-phone-${nonce}`), 'the phone listed beside the tablet');
      await checkLabels('users');
      await checkContrast('users');
      await checkAxe('users');
      await shot('12-users-desktop');
      // Linked, the phone adds to the tablet's memory.
      await remember(phone.api_key, 'Cold today, isn\'t it?');
      equal(JSON.stringify(await pairsOf()), '[2]', "the tablet's memory after the linked phone's feedback");
    });

    await step('models: the Models view uploads a model file (checked, SHA-256, manifest status), refuses one cut in a tensor with the reason, times it and compares it with the active model on the recorded turns, switches the language model to it and rolls back (axe clean), and removes one not in use', async () => {
      await go('models');
      check(await page.isVisible('#models-empty'), 'the data directory\'s models folder is not shown empty');
      await answered('/v1/admin/models', { name: path.basename(llm) }, () => page.setInputFiles('#models-file', llm).then(() => page.click('#models-upload-btn')));
      await until(async () => (await page.$$('#models-table tbody tr')).length === 1, 'the uploaded model in the list');
      const row = `#models-table tr[data-file="${path.basename(llm)}"]`;
      const cells = await page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent.trim()));
      equal(cells.slice(0, 1).concat(cells.slice(2, 5)).join(' | '), 'llm | ok | not in the manifest | –', 'the uploaded model\'s kind, check, manifest and use');
      check(/^sha256 [0-9a-f]{64}$/.test(await page.getAttribute(`${row} th`, 'title')), 'the SHA-256 is not shown');
      const cut = path.join(tmp, 'cut.bin');
      const w = fs.readFileSync(whisper);
      fs.writeFileSync(cut, w.subarray(0, w.length - 4096));
      const resp = await answered('/v1/admin/models', { name: 'cut.bin' }, () => page.setInputFiles('#models-file', cut).then(() => page.click('#models-upload-btn')));
      equal(resp.status(), 422, 'the cut file\'s status');
      check(/truncated: tensor/.test(await page.textContent('#models-msg')), `the reason is not shown: "${await page.textContent('#models-msg')}"`);
      check((await page.textContent('#models-error')).trim().length > 0, 'no error shown for the refused file');
      await checkLabels('models');
      await checkContrast('models');
      await checkAxe('models');
      await shot('12-models-desktop');
      // Time the uploaded model beside the active one: its turn to expect
      // next to the active model's, stored with the file.
      const tm = await answered(`/v1/admin/models/${path.basename(llm)}/time`, null, () => page.click(`${row} button[data-action="time"]`));
      equal(tm.status(), 200, 'the timing\'s status');
      const timed = `#models-timings tr[data-file="${path.basename(llm)}"]`;
      await until(() => page.isVisible(timed), 'the timing in the list of timings');
      const tcells = await page.$$eval(`${timed} td`, (tds) => tds.map((td) => td.textContent.trim()));
      check(/^\d+ ms/.test(tcells[1]) && /^\d+ ms/.test(tcells[2]) && /prompt tokens\/s/.test(tcells[1]), `the timing's turn and figures: ${JSON.stringify(tcells)}`);
      check(/timed: a turn of about [\d.,\s\u00a0\u202f]+ ms/.test(await page.textContent('#models-msg')), `the timing is not reported: "${await page.textContent('#models-msg')}"`);
      await checkLabels('models after a timing');
      await checkContrast('models after a timing');
      await checkAxe('models after a timing');
      // Compare the uploaded model with the active one on the turns the
      // users step recorded: progress, then the two columns of figures.
      await page.fill('#models-compare-turns', '5');
      const cmp = await answered(`/v1/admin/models/${path.basename(llm)}/compare`, null, () => page.click(`${row} button[data-action="compare"]`));
      equal(cmp.status(), 202, 'the comparison\'s status');
      await until(() => page.isVisible('#models-compare-wrap'), 'the comparison\'s table', 120000);
      const figs = await page.$$eval('#models-compare-table tbody tr', (trs) => trs.map((tr) => [tr.dataset.figure, ...[...tr.querySelectorAll('td')].map((td) => td.textContent.trim())]));
      equal(figs.map((f) => f[0]).join(','), 'turns,exact,top1,near,keystrokes,steered,turntime,replytokens', 'the comparison\'s rows');
      const turnsRow = figs[0];
      check(Number(turnsRow[1]) >= 1 && turnsRow[1] === turnsRow[2], `turns replayed, active and candidate: ${JSON.stringify(turnsRow)}`);
      check(figs.slice(1, 5).every((f) => /%$/.test(f[1]) && /%$/.test(f[2])), `the rates: ${JSON.stringify(figs)}`);
      check(/ms$/.test(figs[6][1]) && /ms$/.test(figs[6][2]), `the time per turn: ${JSON.stringify(figs[6])}`);
      check(/compared/.test(await page.textContent('#models-compare-status')), `the comparison is not reported: "${await page.textContent('#models-compare-status')}"`);
      await checkLabels('models after a comparison');
      await checkContrast('models after a comparison');
      await checkAxe('models after a comparison');
      await shot('12-models-compared');
      // Shown again after a visit to another view.
      await go('status');
      await go('models');
      await until(() => page.isVisible('#models-compare-wrap'), 'the comparison shown again on coming back');
      // Switch the language model to the uploaded copy (it loads beside the
      // running one), see this box's choice, then roll back.
      check(await page.isVisible('#models-boxes-empty'), 'a choice is listed before any switch');
      const inUse = () => page.$$eval(`${row} td`, (tds) => tds[4].textContent.trim());
      await page.click(`${row} button[data-action="use"]`);
      await until(() => page.isVisible('#confirm'), 'the switch question');
      const sw = await answered(`/v1/admin/models/${path.basename(llm)}/activate`, null, () => page.click('#confirm-ok'));
      equal(sw.status(), 200, 'the switch\'s status');
      await until(async () => (await inUse()) === 'yes', 'the uploaded model in use after the switch');
      check(/is in use/.test(await page.textContent('#models-msg')), `the switch is not reported: "${await page.textContent('#models-msg')}"`);
      const box = '#models-boxes tr[data-kind="llm"]';
      await until(() => page.isVisible(box), 'this box\'s choice in the list of boxes');
      check(await page.isVisible(`${box} button[data-action="rollback"]`), 'no roll back for this box');
      await checkLabels('models after a switch');
      await checkContrast('models after a switch');
      await checkAxe('models after a switch');
      await shot('12-models-switched');
      await page.click(`${box} button[data-action="rollback"]`);
      await until(() => page.isVisible('#confirm'), 'the roll back question');
      const rb = await answered('/v1/admin/models/llm/rollback', null, () => page.click('#confirm-ok'));
      equal(rb.status(), 200, 'the roll back\'s status');
      await until(async () => (await inUse()) === '–', 'the uploaded model no longer in use after the roll back');
      await page.click(`${row} button.danger`);
      await answered('/v1/admin/models', null, () => page.click('#confirm-ok'));
      await until(() => page.isVisible('#models-empty'), 'the empty list after removing');
    });

        await step('phone (390×844): every view fits without sideways scrolling, tables and charts included, light and dark', async () => {
      await page.setViewportSize(PHONE);
      for (const scheme of ['light', 'dark']) {
        await page.emulateMedia({ colorScheme: scheme });
        for (const v of ['status', 'keys', 'users', 'models', 'prompt', 'logs', 'stats', 'try']) {
          await go(v);
          const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
          check(over <= 0, `${v}: the page is ${over}px wider than the phone screen`);
          await checkPhoneLayout(`${v} (phone)`);
          if (scheme === 'dark') await checkContrast(`${v} (dark)`);
          if (scheme === 'light') await checkAxe(`${v} (phone)`);
          await shot(`10-${v}-phone${scheme === 'dark' ? '-dark' : ''}`);
        }
      }
      await page.emulateMedia({ colorScheme: 'light' });
      await page.setViewportSize(DESKTOP);
    });

    await step('Log out ends the session on the server too', async () => {
      await page.click('#logout');
      await until(() => page.isVisible('#view-login'), 'the sign-in view');
      equal(JSON.stringify(await session()), '{}', 'session storage after log out');
      const r = await apiJSON(base, 'GET', '/v1/admin/keys', { 'X-ADMIN-SESSION': token });
      equal(r.status, 401, 'GET /v1/admin/keys with the old session token');
      await page.setViewportSize(PHONE);
      await shot('11-login-phone');
      await page.setViewportSize(DESKTOP);
    });

    await step('an expired or unknown session sends the admin back to sign-in with the reason', async () => {
      await page.evaluate(() => sessionStorage.setItem('replyd.session', 'no-such-session-token'));
      await page.goto(`${base}/admin/#/keys`);
      await until(() => page.isVisible('#view-login'), 'the sign-in view');
      const msg = (await page.textContent('#login-msg')).trim();
      check(/Signed out/.test(msg) && msg.length > 15, `message "${msg}"`);
      equal(JSON.stringify(await session()), '{}', 'session storage after a 401');
      check(await page.isHidden('#nav'), 'navigation shown after a 401');
    });

    await step('no script errors, CSP violations or requests off the box', async () => {
      check(problems.length === 0, problems.join('\n'));
      check(offsite.length === 0, `requests elsewhere: ${offsite.join(', ')}`);
    });
  } catch (err) {
    steps.setupFailed(err); // the only way out of the try: finish always runs
  }
  return run.finish();
}

await exitWith(main);
