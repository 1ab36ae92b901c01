#!/usr/bin/env node
// The two pages in other languages (issue 24): the real bin/replyd on demo
// models and headless Chromium whose browser language is German, Arabic and
// one more language of the catalogs chosen at random per run (printed; set
// REPLYD_LANG_EXTRA to repeat one). In each: the admin page follows the
// browser, every view and the conversation page (pairing, replies, the
// settings, the letter board) show no string of the English catalog that
// the language translates, <html lang dir> is set, axe finds nothing, and
// screenshots at phone and tablet size go to artifacts/lang/. In Arabic the
// pages are mirrored, and switch scanning and dwell work right to left.
// Ends with "lang: N passed, M failed".
//
// Environment: REPLYD_BIN (default ../../bin/replyd), CHROMIUM (default
// /usr/bin/chromium), REPLYD_LANG_EXTRA (the third language).
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { check, equal, exitWith, freePort, poll, startReplyd, Steps } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const bin = path.resolve(process.env.REPLYD_BIN || path.join(root, 'bin/replyd'));
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const artifacts = path.join(here, 'artifacts', 'lang');
const i18nDir = path.join(root, 'api/web/app/i18n');
const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const PHONE = { width: 390, height: 844 };
const TABLET = { width: 820, height: 1180 };

// The page's own letter boards (a browser module, read as one here).
const { rowsFor, keyCap } = await import(`data:text/javascript,${encodeURIComponent(fs.readFileSync(path.join(root, 'api/web/app/letters.js'), 'utf8'))}`);

const catalog = (lang) => JSON.parse(fs.readFileSync(path.join(i18nDir, `${lang}.json`), 'utf8'));
const en = catalog('en');
const shipped = fs.readdirSync(i18nDir).filter((f) => f.endsWith('.json')).map((f) => f.slice(0, -5));

let page;
const steps = new Steps(shot);
const step = (name, fn) => steps.step(name, fn);
const until = (fn, what, timeoutMs = 20000) => poll(fn, what, timeoutMs, 50);

async function shot(name, p = page) {
  if (p) await p.screenshot({ path: path.join(artifacts, `${name}.png`) });
}

async function axe(where, p = page) {
  if (!(await p.evaluate(() => typeof window.axe !== 'undefined'))) await p.evaluate(axeSource);
  const violations = await p.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => `${v.id} (${v.impact}): ${v.help}\n        ${v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join('\n        ')}`);
  });
  check(violations.length === 0, `axe found violations ${where}:\n      ${violations.join('\n      ')}`);
}

/**
 * The English strings lang translates: every form of every value of the
 * English catalog that lang's catalog words differently, as a pattern
 * that matches a whole text ({placeholders} match anything). Strings the
 * language keeps as they are (proper names: QWERTY, OK, Status...) are
 * not English left behind.
 */
function englishPatterns(lang) {
  const tr = catalog(lang);
  const forms = (v) => (v && typeof v === 'object' ? Object.values(v) : [v]);
  const out = [];
  // Every string the language has: an English string that is also one of
  // its own (fr's "Type" for the Models view's column is the same word as
  // en's app.type, "Type" the button) is not English left over.
  const all = new Set(Object.entries(tr).filter(([k]) => k !== '_meta').flatMap(([, v]) => forms(v).map(String)));
  for (const [key, v] of Object.entries(en)) {
    if (key === '_meta') continue;
    const theirs = new Set(forms(tr[key]).map(String));
    for (const s of forms(v)) {
      const plain = s.replace(/\*\*/g, '');
      // A string that is mostly its values ("{label}: {values}.") says
      // nothing of its language.
      if (theirs.has(s) || all.has(s) || (plain.replace(/\{\w+\}/g, '').match(/[A-Za-z]/g) || []).length < 3) continue;
      const re = plain.split(/\{\w+\}/).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.+?');
      out.push({ key, re: `^${re}$` });
    }
  }
  return out;
}

/** The page's visible strings: text of visible elements (each element's
 * own text, whole), the options of visible selects, aria-label, title,
 * placeholder and alt of visible elements, and the document's title.
 * Content marked lang="en" (replyd's own log lines) or translate="no"
 * (the API's words) is left out. */
function visibleStrings(p) {
  return p.evaluate(() => {
    const out = new Set([document.title]);
    const shown = (el) => el.checkVisibility ? el.checkVisibility() : el.getClientRects().length > 0;
    // English on purpose: replyd's own log lines (lang=en) and the API's
    // words (translate=no, e.g. scope names).
    // Content is not the page's words: the replies, their word chips and
    // the conversation (the demo model writes English-looking text).
    const english = (el) => (el.closest('[lang="en"]') && document.documentElement.lang !== 'en') || el.closest('[translate="no"]')
      || el.closest('.cand, .word-chip, .bubble .text');
    for (const el of document.body.querySelectorAll('*')) {
      if (english(el) || ['SCRIPT', 'STYLE'].includes(el.tagName)) continue;
      const isOption = el.tagName === 'OPTION' && el.parentElement && shown(el.parentElement);
      if (!isOption && !shown(el)) continue;
      const own = el.tagName === 'OPTION' ? el.textContent : el.textContent;
      // An element whose text is its own (no element children), or text
      // with bold parts (a catalog string with **...**).
      if (el.children.length === 0 || [...el.children].every((c) => c.tagName === 'STRONG')) {
        const s = own.replace(/\s+/g, ' ').trim();
        if (s) out.add(s);
      }
      for (const a of ['aria-label', 'title', 'placeholder', 'alt']) {
        const v = el.getAttribute(a);
        if (v) out.add(v.trim());
      }
    }
    return [...out];
  });
}

/** Fails when any visible string of p is an English catalog string that
 * lang translates. */
async function noEnglish(p, lang, where) {
  const patterns = englishPatterns(lang).map((x) => ({ ...x, re: new RegExp(x.re, 's') }));
  const left = [];
  for (const s of await visibleStrings(p)) {
    const hit = patterns.find((x) => x.re.test(s));
    if (hit) left.push(`"${s.slice(0, 80)}" (${hit.key})`);
  }
  check(left.length === 0, `English left ${where} in ${lang}:\n      ${left.join('\n      ')}`);
}

async function htmlLang(p, lang) {
  const got = await p.evaluate(() => ({ lang: document.documentElement.lang, dir: document.documentElement.dir }));
  equal(got.lang, lang, 'html lang');
  equal(got.dir, catalog(lang)._meta.dir, 'html dir');
}

function stubSpeech(ctx) {
  return ctx.addInitScript(() => {
    window.__spoken = [];
    const stub = {
      speak(u) { window.__spoken.push({ text: u.text, lang: u.lang }); },
      cancel() {},
      getVoices() { return []; },
      addEventListener() {},
    };
    Object.defineProperty(window, 'speechSynthesis', { value: stub, configurable: true });
    if (typeof window.SpeechSynthesisUtterance === 'undefined') {
      window.SpeechSynthesisUtterance = class { constructor(t) { this.text = t; } };
    }
  });
}

const ADMIN_VIEWS = ['status', 'keys', 'users', 'models', 'prompt', 'logs', 'stats', 'try'];

async function main() {
  for (const [f, what] of [[bin, 'run "make build" first'], [chromiumPath, 'run scripts/deps.sh (Debian package chromium)']]) {
    if (!fs.existsSync(f)) {
      console.error(`lang: ${f} is missing; ${what}`);
      console.log('lang: 0 passed, 1 failed');
      return 1;
    }
  }
  const others = shipped.filter((l) => !['en', 'de', 'ar'].includes(l)).sort();
  const extra = process.env.REPLYD_LANG_EXTRA || others[crypto.randomInt(others.length)];
  check(shipped.includes(extra), `REPLYD_LANG_EXTRA=${extra} is not a shipped catalog (${shipped.join(' ')})`);
  const langs = ['de', 'ar', extra];
  console.log(`languages: ${langs.join(', ')} (the third chosen at random; REPLYD_LANG_EXTRA=${extra} repeats it)`);

  fs.rmSync(artifacts, { recursive: true, force: true });
  fs.mkdirSync(artifacts, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replyd-lang-'));
  const cleanups = [];
  try {
    const models = path.join(tmp, 'models');
    execFileSync(bin, ['models', 'demo', '--dir', models], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 300000 });
    // A second language model in the data directory's models folder, for
    // the Models view's timing, switch and roll back in each language.
    fs.mkdirSync(path.join(tmp, 'data', 'models'), { recursive: true });
    fs.copyFileSync(path.join(models, 'llm-demo.gguf'), path.join(tmp, 'data', 'models', 'llm-demo-b.gguf'));
    const port = await freePort();
    const adminKey = crypto.randomBytes(24).toString('base64url');
    const replyd = await startReplyd(bin, {
      REPLYD_ADDR: `127.0.0.1:${port}`,
      REPLYD_DATA_DIR: path.join(tmp, 'data'),
      REPLYD_ADMIN_KEY: adminKey,
      REPLYD_LLM_MODEL: path.join(models, 'llm-demo.gguf'),
      REPLYD_WHISPER_MODEL: path.join(models, 'whisper-demo.bin'),
      REPLYD_THREADS: '1',
    }, path.join(artifacts, 'replyd.log'));
    cleanups.push(replyd.stop);
    const base = replyd.base;
    const problems = [];

    for (const lang of langs) {
      const rtl = catalog(lang)._meta.dir === 'rtl';
      const ctx = await chromium.launchPersistentContext(path.join(tmp, `profile-${lang}`), {
        executablePath: chromiumPath,
        headless: true,
        args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
          '--disable-component-update', '--disable-sync', '--no-first-run', `--lang=${lang}`],
        locale: lang,
        viewport: TABLET,
        serviceWorkers: 'block',
        timeout: 60000,
      });
      cleanups.push(() => ctx.close());
      await stubSpeech(ctx);
      const admin = ctx.pages()[0] || (await ctx.newPage());
      page = admin;
      for (const p of [admin]) {
        p.setDefaultTimeout(20000);
        p.on('pageerror', (err) => problems.push(`${lang}: uncaught on ${p.url()}: ${err.message}`));
      }
      let pairURL = '';

      await step(`${lang}: the admin page follows the browser's language in every view; no English left; axe clean`, async () => {
        await admin.goto(`${base}/admin/`);
        await until(() => admin.isVisible('#view-login'), 'the sign-in view');
        await htmlLang(admin, lang);
        equal(await admin.inputValue('#lang'), '', 'the switch says "the browser\'s language"');
        await noEnglish(admin, lang, 'on the sign-in view');
        await axe(`on the sign-in view in ${lang}`, admin);
        await admin.setViewportSize(PHONE);
        await shot(`${lang}-admin-signin-phone`, admin);
        await admin.setViewportSize(TABLET);
        // A wrong key: the error is the catalog's, not the API's English
        // (answered as replyd answers it, so that failed sign-ins do not
        // add up over the three languages).
        await admin.route('**/v1/admin/status', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: JSON.stringify({ error: 'unauthorized', message: 'Missing or invalid admin credential.' }) }));
        await admin.fill('#admin-key', 'not-the-admin-key');
        await admin.click('#key-login');
        await until(async () => (await admin.textContent('#login-error')).trim(), 'the error');
        await admin.unroute('**/v1/admin/status');
        await noEnglish(admin, lang, 'with a sign-in error');
        await admin.fill('#admin-key', adminKey);
        await admin.click('#key-login');
        await until(() => admin.isVisible('#view-status'), 'the status view');
        for (const v of ADMIN_VIEWS) {
          await admin.click(`#nav a[href="#/${v}"]`);
          await until(() => admin.isVisible(`#view-${v}`), `the ${v} view`);
          // Each view draws what replyd answers: wait for its first rows.
          if (v === 'status') await until(async () => (await admin.$$('#engines tbody tr')).length >= 2, 'the engines');
          if (v === 'logs') await until(async () => (await admin.textContent('#logs-meta')).trim(), 'the log entries');
          if (v === 'stats') await until(async () => (await admin.textContent('#stats-outcomes-meta')).trim(), 'the stats');
          if (v === 'prompt') await until(async () => (await admin.textContent('#prompt-version')).trim(), 'the prompt');
          await admin.waitForTimeout(300);
          await noEnglish(admin, lang, `on the admin ${v} view`);
          await axe(`on the admin ${v} view in ${lang}`, admin);
        }
        await admin.click('#nav a[href="#/status"]');
        await until(async () => (await admin.$$('#engines tbody tr')).length >= 2, 'the engines');
        // Dates, numbers and durations in the language's formats.
        const uptime = await admin.$$eval('#status-facts > div', (ds) => ds.map((d) => d.textContent).join(' | '));
        const unit = new Intl.NumberFormat(lang, { style: 'unit', unit: 'second', unitDisplay: 'short' }).format(1).replace(/[\d\u0660-\u0669\s\u200f\u061c]/g, '');
        check(uptime.includes(unit) || /min|ч|дн|ساع|دقي/.test(uptime), `uptime not in ${lang}'s units: ${uptime}`);
        await shot(`${lang}-admin-status-tablet`, admin);
        await admin.setViewportSize(PHONE);
        await shot(`${lang}-admin-status-phone`, admin);
        await admin.setViewportSize(TABLET);
      });

      await step(`${lang}: the Models view times a model, compares it (nothing recorded to replay), switches to it and rolls back in ${lang}; no English left; axe clean`, async () => {
        const row = '#models-table tr[data-file="llm-demo-b.gguf"]';
        const answer = (part, act) => Promise.all([
          admin.waitForResponse((r) => r.url().includes(`/v1/admin/models/${part}`) && r.request().method() === 'POST', { timeout: 120000 }),
          act(),
        ]).then(([r]) => r);
        const said = async (what) => {
          await until(async () => (await admin.textContent('#models-msg')).trim(), what);
          await noEnglish(admin, lang, `on the Models view ${what}`);
          await axe(`on the Models view ${what} in ${lang}`, admin);
        };
        await admin.click('#nav a[href="#/models"]');
        await until(() => admin.isVisible(row), 'the second model in the list');
        const timed = await answer('llm-demo-b.gguf/time', () => admin.click(`${row} button[data-action="time"]`));
        equal(timed.status(), 200, 'the timing\'s status');
        await until(() => admin.isVisible('#models-timings tr[data-file="llm-demo-b.gguf"]'), 'the timing in its table');
        await said('after a timing');
        // Compare, with no recorded turn to replay: the page says why in
        // replyd's words (marked English) beside its own.
        const cmp = await answer('llm-demo-b.gguf/compare', () => admin.click(`${row} button[data-action="compare"]`));
        equal(cmp.status(), 409, 'the comparison without recorded turns');
        await until(async () => (await admin.textContent('#models-compare-status')).includes('no recorded turn'), 'why nothing was compared');
        await noEnglish(admin, lang, 'after a comparison with nothing to replay');
        await axe(`on the Models view after a comparison with nothing to replay in ${lang}`, admin);
        await admin.click(`${row} button[data-action="use"]`);
        await until(() => admin.isVisible('#confirm'), 'the switch question');
        await noEnglish(admin, lang, 'in the switch question');
        const sw = await answer('llm-demo-b.gguf/activate', () => admin.click('#confirm-ok'));
        equal(sw.status(), 200, 'the switch\'s status');
        const box = '#models-boxes tr[data-kind="llm"] button[data-action="rollback"]';
        await until(() => admin.isVisible(box), 'this box\'s choice, with its roll back');
        await said('after a switch');
        await shot(`${lang}-admin-models-switched`, admin);
        await admin.click(box);
        await until(() => admin.isVisible('#confirm'), 'the roll back question');
        await noEnglish(admin, lang, 'in the roll back question');
        const rb = await answer('llm/rollback', () => admin.click('#confirm-ok'));
        equal(rb.status(), 200, 'the roll back\'s status');
        await said('after a roll back');
      });

      await step(`${lang}: Add tablet pairs the conversation page, which follows the browser's language`, async () => {
        await admin.click('#nav a[href="#/keys"]');
        await admin.fill('#kc-client', `tablet-${lang}`);
        await admin.click('#kc-pair');
        await until(() => admin.isVisible('#pairing'), 'the pairing panel');
        await noEnglish(admin, lang, 'on the pairing panel');
        await axe(`on the pairing panel in ${lang}`, admin);
        pairURL = await admin.getAttribute('#pairing-link', 'href');
        page = await ctx.newPage();
        page.setDefaultTimeout(20000);
        page.on('pageerror', (err) => problems.push(`${lang}: uncaught on ${page.url()}: ${err.message}`));
        await page.goto(`${base}/app/`);
        await until(() => page.isVisible('#view-pair'), 'the pairing view');
        await htmlLang(page, lang);
        // A wrong code, answered as replyd answers it: three languages of
        // real wrong codes in a minute would meet the pairing throttle.
        await page.route('**/v1/pair', (route) => route.fulfill({ status: 401, contentType: 'application/json', body: JSON.stringify({ error: 'unauthorized', message: 'The pairing code is not valid.' }) }));
        await page.fill('#pair-code', '2222-2222');
        await page.click('#pair-submit');
        await until(async () => (await page.textContent('#pair-error')).trim(), 'the wrong-code message');
        await page.unroute('**/v1/pair');
        await noEnglish(page, lang, 'on the pairing view with an error');
        await axe(`on the pairing view in ${lang}`);
        await page.setViewportSize(PHONE);
        await shot(`${lang}-app-pair-phone`);
        await page.setViewportSize(TABLET);
        await page.goto(pairURL);
        await until(() => page.isVisible('#view-talk'), 'the conversation view');
        await htmlLang(page, lang);
        await noEnglish(page, lang, 'on the empty conversation');
        await until(async () => (await admin.textContent('#pairing-state')) !== catalog(lang)['admin.pairingWaiting'], 'the admin page to see the tablet paired');
      });

      await step(`${lang}: replies, the settings and the letter board in ${lang}; the board has the language's letters`, async () => {
        await page.click('#partner-open');
        await page.fill('#partner-text', 'Good morning, would you like some tea?');
        await page.click('#partner-add');
        await until(async () => (await page.$$('#cands .cand')).length >= 2, 'the replies', 120000);
        await noEnglish(page, lang, 'with replies');
        await axe(`with replies in ${lang}`);
        await shot(`${lang}-app-replies-tablet`);
        await page.setViewportSize(PHONE);
        await shot(`${lang}-app-replies-phone`);
        await page.setViewportSize(TABLET);
        await page.click('#open-settings');
        await until(() => page.evaluate(() => document.querySelector('#settings').open), 'the settings');
        await noEnglish(page, lang, 'in the settings');
        await axe(`in the settings in ${lang}`);
        await shot(`${lang}-app-settings-tablet`);
        await page.click('#s-cancel');
        await page.click('#spell-open');
        await until(() => page.isVisible('#spell'), 'the letter board');
        const rows = await page.$$eval('#sp-keys .keyrow', (rs) => rs.map((r) => r.textContent));
        const want = rowsFor(lang, 'qwerty').map((r) => [...r].map((c) => (c === "'" ? '’' : keyCap(c, lang))).join(''));
        equal(rows.join('|'), want.join('|'), `the ${lang} keyboard rows`);
        await noEnglish(page, lang, 'on the letter board');
        await axe(`on the letter board in ${lang}`);
        await shot(`${lang}-app-spell-tablet`);
        await page.setViewportSize(PHONE);
        await shot(`${lang}-app-spell-phone`);
        await page.setViewportSize(TABLET);
        await page.click('#sp-close');
      });

      if (rtl) {
        await step(`${lang}: right to left: the action bar, replies, log and letter board are mirrored`, async () => {
          const box = (sel) => page.locator(sel).first().boundingBox();
          const [noneFit, listen] = [await box('#none-fit'), await box('#listen')];
          check(noneFit.x > listen.x, `the action bar is not mirrored: None fit at ${noneFit.x}, Listen at ${listen.x}`);
          const [r1, r2] = [await box('#cands .cand[data-rank="1"]'), await box('#cands .cand[data-rank="2"]')];
          check(r1.x > r2.x, `the best reply is not at the right: ${r1.x} vs ${r2.x}`);
          const align = await page.$eval('#cands .cand', (b) => getComputedStyle(b).direction);
          equal(align, 'rtl', 'direction of a reply');
          const log = await box('#log');
          const partner = await box('#log .bubble.partner');
          check(Math.abs(partner.x + partner.width - (log.x + log.width)) < 20, 'the partner\'s turn is not on the right (the start side)');
          await page.click('#spell-open');
          const keys = await page.$$eval('#sp-keys .keyrow[data-row="1"] .key', (ks) => ks.map((k) => ({ key: k.dataset.key, x: k.getBoundingClientRect().x })));
          check(keys[0].x > keys[keys.length - 1].x, `the first key ${keys[0].key} is not at the right of row 1`);
          await page.click('#sp-close');
        });

        await step(`${lang}: switch scanning steps right to left through the replies and the switch selects`, async () => {
          await page.click('#open-settings');
          await page.check('#s-scan');
          await page.fill('#s-scan-ms', '1.5');
          await page.click('#s-save');
          const scanned = () => page.evaluate(() => document.querySelector('.scanned')?.dataset.rank);
          await until(async () => (await scanned()) === '1', 'the highlight on the best reply', 30000);
          const x1 = (await page.locator('.scanned').boundingBox()).x;
          await until(async () => (await scanned()) === '2', 'the highlight on the second reply', 30000);
          const x2 = (await page.locator('.scanned').boundingBox()).x;
          check(x2 < x1, `the highlight moved right (${x1} → ${x2}), not in the reading direction`);
          await shot(`${lang}-app-scanning-tablet`);
          const text = await page.textContent('.scanned');
          await page.keyboard.press('Space');
          await until(async () => (await page.evaluate(() => window.__spoken.map((u) => u.text))).includes(text), 'the reply spoken by the switch');
          await until(async () => (await page.evaluate(() => document.querySelector('.scanned')?.id)) === 'open-settings', 'the highlight on Settings', 60000);
          await page.keyboard.press('Enter');
          await until(() => page.evaluate(() => document.querySelector('#settings').open), 'the settings opened by the switch');
          await page.uncheck('#s-scan');
          await page.click('#s-save');
        });

        await step(`${lang}: dwell selects right to left, its ring at the control's start-side end`, async () => {
          await page.click('#open-settings');
          await page.check('#s-dwell');
          await page.fill('#s-dwell-ms', '1');
          await page.click('#s-save');
          await page.click('#partner-open');
          await page.fill('#partner-text', 'Shall we go out?');
          await page.click('#partner-add');
          await until(async () => (await page.$$('#cands .cand')).length >= 1, 'the replies', 120000);
          const b = await page.locator('#cands .cand[data-rank="1"]').boundingBox();
          const before = await page.evaluate(() => window.__spoken.length);
          await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2, { steps: 3 });
          await until(() => page.evaluate(() => document.querySelector('.cand.dwelling') !== null), 'the dwell ring');
          const ring = await page.$eval('.cand.dwelling', (el) => {
            const s = getComputedStyle(el, '::after');
            return { left: parseFloat(s.left), right: parseFloat(s.right), width: el.getBoundingClientRect().width };
          });
          check(ring.left < ring.width / 2, `the ring is not on the left (the end side in ${lang}): ${JSON.stringify(ring)}`);
          await shot(`${lang}-app-dwell-tablet`);
          await until(async () => (await page.evaluate(() => window.__spoken.length)) > before, 'the dwell selection', 5000);
          await page.mouse.move(2, 2);
          await page.click('#open-settings');
          await page.uncheck('#s-dwell');
          await page.click('#s-save');
        });
      }

      await step(`${lang}: the admin page's switch changes the language and keeps it; the tablet's page-language setting too`, async () => {
        const other = lang === 'de' ? 'fr' : 'de';
        await admin.selectOption('#lang', other);
        await admin.waitForLoadState('load');
        await until(async () => (await admin.evaluate(() => document.documentElement.lang)) === other, `the admin page in ${other}`);
        await until(() => admin.isVisible('#view-keys'), 'the keys view after the switch');
        await noEnglish(admin, other, 'after the switch');
        await admin.selectOption('#lang', '');
        await admin.waitForLoadState('load');
        await until(async () => (await admin.evaluate(() => document.documentElement.lang)) === lang, `the admin page back in ${lang}`);
        await page.click('#open-settings');
        await page.selectOption('#s-ui', other);
        await page.click('#s-save');
        await until(async () => (await page.evaluate(() => document.documentElement.lang)) === other, `the conversation page in ${other}`);
        await until(() => page.isVisible('#view-talk'), 'the conversation view after the switch');
        await noEnglish(page, other, 'after the page-language setting');
        await page.click('#open-settings');
        await page.selectOption('#s-ui', '');
        await page.click('#s-save');
        await until(async () => (await page.evaluate(() => document.documentElement.lang)) === lang, `the conversation page back in ${lang}`);
      });
      await ctx.close();
      cleanups.pop();
    }

    await step('no script errors', async () => {
      check(problems.length === 0, problems.join('\n      '));
    });
  } catch (err) {
    steps.setupFailed(err);
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return steps.summary('lang', artifacts);
}

exitWith(main);
