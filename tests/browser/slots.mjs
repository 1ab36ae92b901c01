#!/usr/bin/env node
// The conversation page's reply slots (issue 42): from the moment a turn's
// answer is awaited the page shows an empty slot for each reply asked for
// (options.max_candidates), fills each in place, in rank order, as its
// reply arrives (a `candidate` event on /v1/infer's event stream or the
// live socket, then the final `candidates`), and nothing moves.
//
// Most steps play the server's events to the page one by one, at moments
// the test chooses (a scripted event stream in place of /v1/infer's, and
// Playwright's routeWebSocket in place of the live socket), so that what
// the page does between two replies can be looked at: slots present from
// the start, filled in place in rank order, bounding boxes unchanged as
// others arrive, axe with slots half filled, touch, keyboard, switch
// scanning and dwell while replies arrive, the first reply said once
// (polite), fewer replies than slots, a live turn's replies and an older
// turn's ignored, and all of it in Arabic (right to left). The last steps
// run against the real bin/replyd on demo models, on the upload path and
// the live socket (Chromium's fake microphone plays espeak-ng speech).
// Screenshots go to artifacts/slots/. Ends with "slots: N passed, M failed".
//
// Environment: REPLYD_BIN (default ../../bin/replyd), CHROMIUM (default
// /usr/bin/chromium).
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { apiKeyFor, axeClean, begin, check, chromiumArgs, equal, exitWith, freePort, poll, startReplyd, Steps } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const bin = path.resolve(process.env.REPLYD_BIN || path.join(root, 'bin/replyd'));
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const artifacts = path.join(here, 'artifacts', 'slots');
const TABLET = { width: 820, height: 1180 };
const PHONE = { width: 390, height: 844 };
const SETTINGS = 'replyd.app.settings';

let page;
const steps = new Steps(shot);
const step = (name, fn) => steps.step(name, fn);
const until = (fn, what, timeoutMs = 20000) => poll(fn, what, timeoutMs, 25);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function shot(name, p = page) {
  if (p) await p.screenshot({ path: path.join(artifacts, `${name}.png`) });
}

const axe = (where, p = page) => axeClean(p, where);

/** Run in every page before its scripts: speech is recorded, not spoken
 * (window.__spoken); with window.__scripted set, POST /v1/infer answers a
 * text/event-stream the test writes event by event (window.__sse.send,
 * .end; .aborted once the page aborted it), and its payload is kept
 * (window.__payloads); every element the scanning highlight lands on and
 * every reply drawn is recorded (window.__scanned, window.__fills: the
 * slots' boxes at that moment). */
function instruments() {
  window.__spoken = [];
  const stub = {
    speak(u) { window.__spoken.push(u.text); },
    cancel() {},
    getVoices() { return []; },
    addEventListener() {},
  };
  Object.defineProperty(window, 'speechSynthesis', { value: stub, configurable: true });
  if (typeof window.SpeechSynthesisUtterance === 'undefined') {
    window.SpeechSynthesisUtterance = class { constructor(t) { this.text = t; } };
  }
  window.__scripted = false;
  window.__payloads = [];
  window.__sse = null;
  const real = window.fetch.bind(window);
  window.__streams = [];
  window.fetch = async (url, init = {}) => {
    if (!String(url).endsWith('/v1/infer')) return real(url, init);
    if (!window.__scripted) {
      // The real answer, read as the page reads it (UTF-8), for the test.
      const res = await real(url, init);
      if (!res.body) return res;
      const [mine, theirs] = res.body.tee();
      const rec = { text: null };
      window.__streams.push(rec);
      new Response(theirs).text().then((t) => { rec.text = t; }, () => { rec.text = ''; });
      return new Response(mine, { status: res.status, statusText: res.statusText, headers: res.headers });
    }
    const part = init.body && init.body.get && init.body.get('payload');
    if (part) window.__payloads.push(JSON.parse(await part.text()));
    let ctl;
    const body = new ReadableStream({ start(c) { ctl = c; } });
    const enc = new TextEncoder();
    const sse = {
      aborted: false,
      send(event, data) { if (!sse.aborted) ctl.enqueue(enc.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)); },
      end() { if (!sse.aborted) ctl.close(); },
    };
    window.__sse = sse;
    if (init.signal) {
      init.signal.addEventListener('abort', () => {
        sse.aborted = true;
        try { ctl.error(new DOMException('aborted', 'AbortError')); } catch { /* closed */ }
      });
    }
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  };
  window.__scanned = [];
  window.__fills = [];
  const boxes = () => [...document.querySelectorAll('#cands > li')].map((li) => {
    const r = li.getBoundingClientRect();
    return { x: Math.round(r.x), y: Math.round(r.y), w: Math.round(r.width), h: Math.round(r.height) };
  });
  document.addEventListener('DOMContentLoaded', () => {
    new MutationObserver((records) => {
      for (const m of records) {
        if (m.type === 'attributes' && m.target.classList.contains('scanned') && !(m.oldValue || '').split(' ').includes('scanned')) {
          const el = m.target;
          window.__scanned.push({ at: performance.now(), id: el.id || null, rank: el.dataset.rank || null, slot: Boolean(el.closest('li.slot')), scannable: el.hasAttribute('data-scan') || el.hasAttribute('data-scan-group') });
        }
        if (m.type === 'childList') {
          for (const n of m.addedNodes) {
            if (n.nodeType === 1 && n.matches('#cands > li > .cand')) window.__fills.push({ at: performance.now(), rank: Number(n.dataset.rank), text: n.textContent, boxes: boxes() });
          }
        }
      }
    }).observe(document.documentElement, { subtree: true, childList: true, attributes: true, attributeFilter: ['class'], attributeOldValue: true });
  });
}

/** The reply list as drawn: each slot's reply (null: empty), state and box. */
const slotsNow = (p = page) => p.$$eval('#cands > li', (lis) => lis.map((li) => {
  const r = li.getBoundingClientRect();
  const b = li.querySelector('.cand');
  return {
    empty: li.classList.contains('slot'),
    gone: li.classList.contains('gone'),
    hidden: li.getAttribute('aria-hidden') === 'true',
    controls: li.querySelectorAll('[data-scan], [data-dwell], button, [tabindex]').length,
    text: b ? b.textContent : null,
    rank: b ? Number(b.dataset.rank) : null,
    box: { x: Math.round(r.x), y: Math.round(r.y), w: Math.round(r.width), h: Math.round(r.height) },
  };
}));

const boxOf = (sel, p = page) => p.$eval(sel, (el) => {
  const r = el.getBoundingClientRect();
  return { x: Math.round(r.x), y: Math.round(r.y), w: Math.round(r.width), h: Math.round(r.height) };
});

const sameBox = (a, b) => a.x === b.x && a.y === b.y && a.w === b.w && a.h === b.h;

/** The slots' boxes are those of before (the first n, or all). */
function unmoved(before, after, what, n = before.length) {
  for (let i = 0; i < n; i++) check(sameBox(before[i].box || before[i], after[i].box || after[i]), `${what}: slot ${i + 1} moved from ${JSON.stringify(before[i].box || before[i])} to ${JSON.stringify(after[i].box || after[i])}`);
}

const said = (p = page) => p.textContent('#cands-said');
const spoken = (p = page) => p.evaluate(() => window.__spoken.slice());

// The replies the scripted server sends: the third is long enough to need
// the slot's smaller drawing.
const REPLIES = [
  'Yes please, with milk.',
  'Not now, thanks.',
  'Could you bring it to the garden later, when the sun is out and my sister has arrived with the children?',
  'What kind of tea?',
];
const candidate = (rank, text = REPLIES[rank - 1], extra = {}) => ({ inference_id: 'inf_slotsAAAAAAAAAAAAAAAAA', rank, text, language: 'en', ...extra });
const answer = (list, extra = {}) => ({
  response: list,
  candidates: list.map((text, i) => ({ text, rank: i + 1, length: text.split(' ').length, language: 'en' })),
  inference_id: 'inf_slotsAAAAAAAAAAAAAAAAA',
  ...extra,
});
const sse = (event, data, p = page) => p.evaluate(([e, d]) => window.__sse.send(e, d), [event, data]);
const sseEnd = (p = page) => p.evaluate(() => window.__sse.end());

/** The partner types text (the scripted server answers): resolves once the
 * page sent its request. */
async function partnerTypes(text, p = page) {
  const n = await p.evaluate(() => window.__payloads.length);
  // Not clicks: while the page scans, a press anywhere is the switch.
  await p.evaluate(() => document.querySelector('#partner-open').click());
  await p.fill('#partner-text', text);
  await p.press('#partner-text', 'Enter');
  await until(() => p.evaluate((k) => window.__payloads.length > k && window.__sse, n), 'the page\'s request');
  return p.evaluate(() => window.__payloads.at(-1));
}

/** Waits until reply rank is drawn. */
const shown = (rank, p = page) => until(async () => (await slotsNow(p))[rank - 1]?.text, `reply ${rank} drawn`);

/** Saves settings (over the defaults) and reloads the page. */
async function settings(s, p = page) {
  await p.evaluate(([k, v]) => localStorage.setItem(k, JSON.stringify(v)), [SETTINGS, s]);
  await p.reload();
  await until(() => p.isVisible('#view-talk'), 'the conversation view');
}

async function main() {
  const run = begin('slots', steps, bin, chromiumPath, artifacts);
  if (!run) return 1;
  const { tmp, cleanups, llm, whisper } = run;
  try {
    const vadModel = path.join(root, 'models', 'silero_vad_v5.onnx');
    check(fs.existsSync(vadModel), `${vadModel} is missing: run scripts/deps.sh (or make vad-model)`);
    const speech = path.join(tmp, 'speech.wav');
    const raw = path.join(tmp, 'raw.wav');
    execFileSync('espeak-ng', ['-v', 'en-us', '-w', raw, 'Good morning. Would you like some tea or a glass of water?']);
    execFileSync('sox', [raw, '-r', '48000', speech, 'pad', '0.5', '4']);

    const port = await freePort();
    const adminKey = crypto.randomBytes(24).toString('base64url');
    const replyd = await startReplyd(bin, {
      REPLYD_ADDR: `127.0.0.1:${port}`,
      REPLYD_DATA_DIR: path.join(tmp, 'data'),
      REPLYD_ADMIN_KEY: adminKey,
      REPLYD_LLM_MODEL: llm,
      REPLYD_WHISPER_MODEL: whisper,
      REPLYD_VAD_MODEL: vadModel,
      REPLYD_LOG_LEVEL: 'debug',
      REPLYD_THREADS: '1',
    }, path.join(artifacts, 'replyd.log'));
    cleanups.push(replyd.stop);
    const base = replyd.base;
    const apiKey = await apiKeyFor(base, adminKey, 'slots-tablet');

    const problems = [];
    const launch = async (lang) => {
      const args = chromiumArgs.filter((a) => !a.startsWith('--lang='));
      const ctx = await chromium.launchPersistentContext(path.join(tmp, `profile-${lang}`), {
        executablePath: chromiumPath,
        headless: true,
        args: [...args, `--lang=${lang}`, `--use-file-for-fake-audio-capture=${speech}`],
        locale: lang,
        viewport: TABLET,
        hasTouch: true,
        permissions: ['microphone'],
        serviceWorkers: 'block',
        timeout: 60000,
      });
      cleanups.push(() => ctx.close());
      await ctx.addInitScript(instruments);
      await ctx.addInitScript((key) => localStorage.setItem('replyd.app.key', key), apiKey);
      const p = ctx.pages()[0] || (await ctx.newPage());
      p.setDefaultTimeout(20000);
      p.on('pageerror', (err) => problems.push(`${lang}: uncaught: ${err.message}`));
      await p.goto(`${base}/app/`);
      await until(() => p.isVisible('#view-talk'), 'the conversation view');
      return p;
    };

    page = await launch('en-US');
    await page.evaluate(() => { window.__scripted = true; });

    let first;
    await step('slots: an empty slot for each reply asked for from the moment the answer is awaited; no control, no focus', async () => {
      await settings({ count: 4 });
      await page.evaluate(() => { window.__scripted = true; });
      const payload = await partnerTypes('Would you like some tea?');
      equal(payload.options.max_candidates, 4, 'max_candidates asked for');
      const s = await slotsNow();
      equal(s.length, 4, 'slots shown while the answer is awaited');
      check(s.every((x) => x.empty && x.hidden && x.controls === 0 && x.text === null), `the slots: ${JSON.stringify(s)}`);
      check(s.every((x) => x.box.h > 40 && x.box.w > 100), `a slot has no size: ${JSON.stringify(s.map((x) => x.box))}`);
      check(await page.isVisible('#cands-wrap'), 'the reply list is hidden while the answer is awaited');
      check(!(await page.evaluate(() => document.activeElement.closest('#cands'))), 'the focus is in the empty list');
      equal(await said(), '', 'said before any reply');
      await axe('with the slots empty');
      await shot('01-slots-empty-tablet');
      first = s;
    });

    await step('filled in place, in rank order: each reply takes its rank\'s slot and no slot moves as the others arrive; axe with slots half filled', async () => {
      await sse('candidate', candidate(1));
      await shown(1);
      let s = await slotsNow();
      equal(s[0].text, REPLIES[0], 'slot 1');
      check(s.slice(1).every((x) => x.empty), `slots after the first reply: ${JSON.stringify(s)}`);
      unmoved(first, s, 'after reply 1');
      equal(await page.evaluate(() => document.activeElement.dataset.rank), '1', 'the focus on the first reply');
      await sse('candidate', candidate(2));
      await shown(2);
      s = await slotsNow();
      unmoved(first, s, 'after reply 2');
      equal(await page.evaluate(() => document.activeElement.dataset.rank), '1', 'the focus after reply 2 (it stays)');
      await axe('with slots half filled');
      await shot('02-slots-half-tablet');
      await sse('candidate', candidate(3));
      await shown(3);
      s = await slotsNow();
      unmoved(first, s, 'after reply 3 (a long one)');
      check(await page.$eval('#cands > li:nth-child(3) .cand-text', (e) => e.classList.contains('long')), 'the long reply is not drawn smaller');
      // The final answer: the fourth reply, and the first three again.
      await sse('candidates', answer(REPLIES));
      await sseEnd();
      await shown(4);
      s = await slotsNow();
      unmoved(first, s, 'after the final answer');
      equal(JSON.stringify(s.map((x) => x.text)), JSON.stringify(REPLIES), 'the replies in rank order');
      equal(JSON.stringify(s.map((x) => x.rank)), '[1,2,3,4]', 'the ranks');
      const fills = await page.evaluate(() => window.__fills.slice(-4));
      equal(JSON.stringify(fills.map((f) => f.rank)), '[1,2,3,4]', 'the order the replies were drawn in');
      for (const f of fills) unmoved(first.map((x) => x.box), f.boxes, `when reply ${f.rank} was drawn`);
      await axe('with every slot filled');
      await shot('03-slots-full-tablet');
    });

    await step('a screen reader hears the first reply once (a polite live region), not each one', async () => {
      const region = await page.$eval('#cands-said', (e) => ({ live: e.getAttribute('aria-live'), inHidden: Boolean(e.closest('[hidden]')) }));
      equal(region.live, 'polite', 'aria-live');
      equal(region.inHidden, false, 'the live region is inside something hidden');
      equal(await said(), `First suggestion: ${REPLIES[0]}`, 'said after all four replies');
      // The next turn says its own first reply once.
      await page.click('#cands .cand[data-rank="4"]');
      equal(await said(), '', 'said after the reply was chosen');
    });

    await step('fewer replies than slots: the empty ones lose their outline and keep their place, so nothing shown moves (the Spell button neither)', async () => {
      await partnerTypes('Are you warm enough?');
      const before = await slotsNow();
      await sse('candidate', candidate(1, 'Yes, thank you.'));
      await shown(1);
      const spell = await boxOf('#spell-open');
      await sse('candidates', answer(['Yes, thank you.', 'A blanket, please.']));
      await sseEnd();
      await shown(2);
      await until(async () => (await slotsNow()).filter((x) => x.gone).length === 2, 'the empty slots to go');
      const s = await slotsNow();
      unmoved(before, s, 'after a short answer');
      check(s.slice(2).every((x) => x.empty && x.gone && x.controls === 0), `the slots left empty: ${JSON.stringify(s.slice(2))}`);
      const border = await page.$eval('#cands > li.gone', (e) => getComputedStyle(e).borderTopColor);
      check(/rgba\(0, 0, 0, 0\)|transparent/.test(border), `an empty slot still outlined: ${border}`);
      check(sameBox(spell, await boxOf('#spell-open')), 'the Spell button moved');
      await shot('04-slots-fewer-tablet');
      await page.click('#cands .cand[data-rank="1"]');
    });

    await step('touch: the first reply, tapped before the others arrive, is spoken and reported; the rest of the answer is never drawn', async () => {
      const fb = [];
      await page.route('**/v1/feedback', (route) => {
        fb.push(JSON.parse(route.request().postData()));
        return route.fulfill({ status: 200, contentType: 'application/json', body: '{"inference_id":"inf_slotsAAAAAAAAAAAAAAAAA","outcome":"spoken"}' });
      });
      await partnerTypes('Shall I open the window?');
      await sse('candidate', candidate(1, 'Yes, a little.'));
      await shown(1);
      await page.tap('#cands .cand[data-rank="1"]');
      equal((await spoken()).at(-1), 'Yes, a little.', 'spoken by touch');
      await until(() => fb.length === 1, 'the feedback');
      check(fb[0].inference_id === 'inf_slotsAAAAAAAAAAAAAAAAA' && fb[0].chosen_rank === 1, `feedback ${JSON.stringify(fb[0])}`);
      // The request is let go, not cancelled: replyd, told by the
      // feedback, answers with the replies it sent.
      check(!(await page.evaluate(() => window.__sse.aborted)), 'the request was cancelled');
      await sse('candidate', candidate(2));
      await sse('candidates', answer([REPLIES[0], REPLIES[1]]));
      await sseEnd();
      await sleep(300);
      equal((await slotsNow()).length, 0, 'slots or replies drawn after the choice');
      check(!(await page.isVisible('#progress')), 'the progress shown after the choice');
      await page.unroute('**/v1/feedback');
    });

    await step('keyboard: the focus stays on the first reply as the others arrive; Tab reaches the second, which Space speaks', async () => {
      await partnerTypes('Do you want music on?');
      await sse('candidate', candidate(1, 'Yes, jazz.'));
      await shown(1);
      equal(await page.evaluate(() => document.activeElement.dataset.rank), '1', 'the focus on the first reply');
      await sse('candidate', candidate(2, 'Not today.'));
      await shown(2);
      await sse('candidate', candidate(3, 'Something quiet.'));
      await shown(3);
      equal(await page.evaluate(() => document.activeElement.dataset.rank), '1', 'the focus after the others arrived');
      await page.keyboard.press('Tab');
      equal(await page.evaluate(() => document.activeElement.dataset.rank), '2', 'Tab from the first reply');
      await page.keyboard.press('Space');
      equal((await spoken()).at(-1), 'Not today.', 'spoken by keyboard');
    });

    await step('switch scanning: never on an empty slot; at the first reply when it arrives; keeps its place as the others arrive; the switch picks one', async () => {
      await settings({ count: 4, scan: true, scan_s: 1 });
      await page.evaluate(() => { window.__scripted = true; });
      await partnerTypes('Which film shall we watch?');
      // The highlight goes round the page's controls while the answer is awaited.
      await sleep(2500);
      await sse('candidate', candidate(1, 'The one with the dog.'));
      await shown(1);
      const t1 = await page.evaluate(() => performance.now());
      await until(() => page.evaluate(() => document.querySelector('.scanned')?.dataset.rank === '1'), 'the highlight on the first reply', 3000);
      const jumped = await page.evaluate(() => performance.now());
      check(jumped - t1 < 1000, `the highlight reached the first reply ${Math.round(jumped - t1)} ms after it showed`);
      // Past the first reply (the others have not come), the highlight is
      // on the Spell button when reply 2 arrives: it stays there, and the
      // next step goes on from there.
      await until(() => page.evaluate(() => document.querySelector('.scanned')?.id === 'spell-open'), 'the highlight on Spell', 5000);
      const n = await page.evaluate(() => window.__scanned.length);
      await sse('candidate', candidate(2, 'A comedy.'));
      await shown(2);
      await sleep(100);
      equal(await page.evaluate(() => document.querySelector('.scanned')?.id), 'spell-open', 'the highlight just after reply 2 arrived');
      await until(() => page.evaluate((k) => window.__scanned.length > k + 1, n), 'the next highlight', 5000);
      const after = await page.evaluate((k) => window.__scanned.slice(k).filter((x) => x.id !== 'spell-open')[0], n);
      equal(after.id, 'none-fit', 'the control highlighted after Spell (the scanning did not start again)');
      await sse('candidates', answer(['The one with the dog.', 'A comedy.', 'Nothing sad.']));
      await sseEnd();
      await shown(3);
      await until(() => page.evaluate(() => document.querySelector('.scanned')?.dataset.rank === '2'), 'the highlight on reply 2', 20000);
      await page.keyboard.press('Space');
      equal((await spoken()).at(-1), 'A comedy.', 'spoken by the switch');
      const marks = await page.evaluate(() => window.__scanned);
      check(marks.every((m) => !m.slot && m.scannable), `the highlight landed on an empty slot or a non-control: ${JSON.stringify(marks.filter((m) => m.slot || !m.scannable))}`);
      await settings({ count: 4 });
      await page.evaluate(() => { window.__scripted = true; });
    });

    await step('dwell: resting on an empty slot selects nothing; a dwell on the first reply goes on while the others arrive, and selects it', async () => {
      await settings({ count: 4, dwell: true, dwell_s: 1.5 });
      await page.evaluate(() => { window.__scripted = true; });
      await partnerTypes('Tea or coffee?');
      await sse('candidate', candidate(1, 'Tea, please.'));
      await shown(1);
      const before = (await spoken()).length;
      const empty = await boxOf('#cands > li:nth-child(3)');
      await page.mouse.move(empty.x + empty.w / 2, empty.y + empty.h / 2, { steps: 3 });
      await sleep(2000);
      equal((await spoken()).length, before, 'spoken by resting on an empty slot');
      equal(await page.$$eval('.dwelling', (e) => e.length), 0, 'a dwell ring on an empty slot');
      const b1 = await boxOf('#cands .cand[data-rank="1"]');
      await page.mouse.move(b1.x + b1.w / 2, b1.y + b1.h / 2, { steps: 3 });
      await until(() => page.evaluate(() => document.querySelector('.cand.dwelling')?.dataset.rank === '1'), 'the dwell ring on reply 1');
      const ring = await page.evaluate(() => performance.now());
      const ringEl = await page.$('.cand.dwelling');
      await sse('candidate', candidate(2, 'Coffee.'));
      await shown(2);
      check(await ringEl.evaluate((e) => e.isConnected && e.classList.contains('dwelling')), 'the dwell on reply 1 was cut by reply 2');
      check(sameBox(b1, await boxOf('#cands .cand[data-rank="1"]')), 'reply 1 moved under the pointer');
      await sse('candidates', answer(['Tea, please.', 'Coffee.', 'Water.']));
      await sseEnd();
      await until(async () => (await spoken()).length > before, 'the dwell selection', 5000);
      const took = (await page.evaluate(() => performance.now())) - ring;
      equal((await spoken()).at(-1), 'Tea, please.', 'spoken by dwell');
      check(took < 1500 + 1000, `the dwell took ${Math.round(took)} ms (1500 ms asked): it started again`);
      await page.mouse.move(2, 2);
      await settings({ count: 4 });
      await page.evaluate(() => { window.__scripted = true; });
    });

    // The live socket, played by the test: turns with numbers.
    const liveSocket = async (p) => {
      const sock = { route: null, sent: [] };
      await p.route('**/v1/live/ticket**', (route) => route.fulfill({ status: 201, contentType: 'application/json', body: JSON.stringify({ ticket: 'rlt_slots', url: '/v1/live?ticket=rlt_slots' }) }));
      await p.routeWebSocket(/\/v1\/live\?ticket=rlt_slots/, (ws) => {
        sock.route = ws;
        ws.onMessage((m) => { if (typeof m === 'string') sock.sent.push(m); });
      });
      sock.send = (event, data) => sock.route.send(JSON.stringify({ event, data }));
      sock.stop = () => p.unroute('**/v1/live/ticket**');
      return sock;
    };

    await step('live (hands-free): slots at the turn\'s end_of_turn, filled by its candidate events; an older turn\'s candidate and candidates never drawn', async () => {
      await settings({ count: 3, hands_free: true });
      const sock = await liveSocket(page);
      await page.click('#listen');
      await until(() => sock.route && sock.sent.length > 0, 'the live socket\'s payload');
      sock.send('speech_start', { turn: 1 });
      sock.send('end_of_turn', { turn: 1, audio_ms: 1800 });
      await until(async () => (await slotsNow()).length === 3, 'the live turn\'s slots');
      const before = await slotsNow();
      check(before.every((x) => x.empty), `the live slots: ${JSON.stringify(before)}`);
      sock.send('transcript', { turn: 1, transcript: 'Is it raining?' });
      await until(async () => (await page.$$('#log .bubble')).length === 1, 'the partner\'s turn');
      const afterBubble = await slotsNow();
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 1, text: 'Yes, take a coat.', language: 'en' });
      await shown(1);
      unmoved(afterBubble, await slotsNow(), 'after the live reply 1');
      // The partner speaks again before the rest came: the newer turn's
      // slots; turn 1's later events are not drawn.
      sock.send('speech_start', { turn: 2 });
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 2, text: 'Turn one, reply two.', language: 'en' });
      sock.send('end_of_turn', { turn: 2, audio_ms: 1500 });
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 3, text: 'Turn one, reply three.', language: 'en' });
      sock.send('transcript', { turn: 2, transcript: 'Or is it sunny?' });
      sock.send('candidate', { turn: 2, inference_id: 'inf_live2AAAAAAAAAAAAAAAAA', rank: 1, text: 'It is sunny.', language: 'en' });
      sock.send('candidates', { turn: 1, ...answer(['Yes, take a coat.', 'Turn one, reply two.', 'Turn one, reply three.'], { inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', transcript: 'Is it raining?' }) });
      await until(async () => (await slotsNow())[0]?.text === 'It is sunny.', 'turn 2\'s first reply');
      await sleep(200);
      let s = await slotsNow();
      check(s.length === 3 && s.slice(1).every((x) => x.empty), `turn 1's replies drawn in turn 2: ${JSON.stringify(s.map((x) => x.text))}`);
      sock.send('candidates', { turn: 2, ...answer(['It is sunny.', 'Let us go out.'], { inference_id: 'inf_live2AAAAAAAAAAAAAAAAA', transcript: 'Or is it sunny?' }) });
      await shown(2);
      s = await slotsNow();
      equal(JSON.stringify(s.map((x) => x.text)), JSON.stringify(['It is sunny.', 'Let us go out.', null]), 'turn 2\'s replies');
      check(s[2].gone, 'the third slot of a two-reply answer is not gone');
      equal(await said(), 'First suggestion: It is sunny.', 'said for turn 2');
      equal(JSON.stringify((await page.$$eval('#log .bubble .text', (e) => e.map((x) => x.textContent)))), JSON.stringify(['Is it raining?', 'Or is it sunny?']), 'the partner\'s turns');
      await axe('with a live turn\'s replies');
      await page.click('#listen'); // stops listening
      await sock.stop();
    });

    await step('live (hands-free): a newer turn that holds no speech (a breath) leaves the older turn\'s replies, drawn from its answer', async () => {
      await settings({ count: 3, hands_free: true });
      const sock = await liveSocket(page);
      await page.click('#listen');
      await until(() => sock.route && sock.sent.length > 0, 'the live socket\'s payload');
      const turn1 = ['Yes, take a coat.', 'Turn one, reply two.', 'Turn one, reply three.'];
      sock.send('speech_start', { turn: 1 });
      sock.send('end_of_turn', { turn: 1, audio_ms: 1800 });
      sock.send('transcript', { turn: 1, transcript: 'Is it raining?' });
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 1, text: turn1[0], language: 'en' });
      await shown(1);
      // A breath: a turn begins and ends, then proves to hold no speech; turn
      // 1 was not superseded, so its answer still comes, and is drawn.
      sock.send('speech_start', { turn: 2 });
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 2, text: turn1[1], language: 'en' });
      sock.send('end_of_turn', { turn: 2, audio_ms: 400 });
      sock.send('candidates', { turn: 2, ...answer([], { no_speech: true }) });
      sock.send('candidate', { turn: 1, inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', rank: 3, text: turn1[2], language: 'en' });
      sock.send('candidates', { turn: 1, ...answer(turn1, { inference_id: 'inf_live1AAAAAAAAAAAAAAAAA', transcript: 'Is it raining?' }) });
      await shown(3);
      const s = await slotsNow();
      equal(JSON.stringify(s.map((x) => x.text)), JSON.stringify(turn1), 'turn 1\'s replies after a breath');
      await page.click('#listen'); // stops listening
      await sock.stop();
    });

    await step('Arabic (right to left): slots from the start, filled in place from the right, nothing moves; axe clean; keyboard, scanning and dwell', async () => {
      const ar = await launch('ar');
      const main = page;
      page = ar;
      try {
        equal(await page.getAttribute('html', 'dir'), 'rtl', '<html dir>');
        await settings({ count: 4, scan: true, scan_s: 1 });
        await page.evaluate(() => { window.__scripted = true; });
        await partnerTypes('هل تريد الشاي؟');
        const before = await slotsNow();
        equal(before.length, 4, 'slots in Arabic');
        check(before[0].box.x > before[1].box.x, `slot 1 is not right of slot 2: ${JSON.stringify(before.map((x) => x.box))}`);
        await axe('with the slots empty, in Arabic');
        await sse('candidate', candidate(1, 'نعم، من فضلك.', { language: 'ar' }));
        await shown(1);
        await until(() => page.evaluate(() => document.querySelector('.scanned')?.dataset.rank === '1'), 'the highlight on the first reply', 3000);
        await sse('candidate', candidate(2, 'لا، شكرًا.', { language: 'ar' }));
        await shown(2);
        unmoved(before, await slotsNow(), 'in Arabic after reply 2');
        equal(await said(), 'الاقتراح الأول: نعم، من فضلك.', 'said in Arabic');
        await axe('with slots half filled, in Arabic');
        await shot('05-slots-half-ar-tablet');
        await page.setViewportSize(PHONE);
        await axe('with slots half filled, in Arabic, on a phone');
        await shot('05-slots-half-ar-phone');
        await page.setViewportSize(TABLET);
        await sse('candidates', answer(['نعم، من فضلك.', 'لا، شكرًا.', 'ربما لاحقًا.'], { candidates: undefined }));
        await sseEnd();
        await shown(3);
        unmoved(before, await slotsNow(), 'in Arabic after the final answer', 3);
        await until(() => page.evaluate(() => document.querySelector('.scanned')?.dataset.rank === '2'), 'the highlight on reply 2', 20000);
        await page.keyboard.press('Enter');
        equal((await spoken()).at(-1), 'لا، شكرًا.', 'spoken by the switch in Arabic');
        // Keyboard and dwell, scanning off.
        await settings({ count: 4, dwell: true, dwell_s: 1 });
        await page.evaluate(() => { window.__scripted = true; });
        await partnerTypes('هل أنت بخير؟');
        await sse('candidate', candidate(1, 'أنا بخير.', { language: 'ar' }));
        await shown(1);
        equal(await page.evaluate(() => document.activeElement.dataset.rank), '1', 'the focus on the first reply in Arabic');
        const b1 = await boxOf('#cands .cand[data-rank="1"]');
        const n = (await spoken()).length;
        await page.mouse.move(b1.x + b1.w / 2, b1.y + b1.h / 2, { steps: 3 });
        await until(() => page.evaluate(() => document.querySelector('.cand.dwelling') !== null), 'the dwell ring in Arabic');
        await sse('candidate', candidate(2, 'متعب قليلًا.', { language: 'ar' }));
        await until(async () => (await spoken()).length > n, 'the dwell selection in Arabic', 5000);
        equal((await spoken()).at(-1), 'أنا بخير.', 'spoken by dwell in Arabic');
      } finally {
        page = main;
      }
    });

    await step('real replyd, upload path: the slots show the count asked for at once and the replies fill them in rank order, equal to the final answer, without moving', async () => {
      await settings({ count: 3 });
      await page.evaluate(() => { window.__scripted = false; window.__fills = []; });
      await page.click('#partner-open');
      await page.fill('#partner-text', 'Would you like a cup of tea?');
      await page.click('#partner-add');
      const at = await slotsNow();
      check(at.length === 3 && at.every((x) => x.empty || x.text), `the slots right after the request: ${JSON.stringify(at)}`);
      const text = await until(() => page.evaluate(() => window.__streams.at(-1)?.text), 'the answer', 120000);
      const events = text.split(/\n\n/).filter((b) => b.trim()).map((b) => {
        const m = b.match(/^event: (\w+)\ndata: (.*)$/s);
        return m ? { event: m[1], data: JSON.parse(m[2]) } : null;
      });
      const final = events.find((e) => e && e.event === 'candidates');
      check(final, `no candidates event: ${text.slice(0, 300)}`);
      const want = final.data.response.filter((r) => r.trim());
      check(want.length >= 1, `no replies: ${JSON.stringify(final.data)}`);
      await until(async () => (await slotsNow()).filter((x) => x.text).length === want.length, 'the replies drawn');
      const s = await slotsNow();
      equal(JSON.stringify(s.filter((x) => x.text).map((x) => x.text)), JSON.stringify(want), 'the replies drawn, in rank order');
      // Whatever candidate events replyd sent came before the final one, in rank order, equal to it.
      const each = events.filter((e) => e && e.event === 'candidate').map((e) => e.data);
      each.forEach((c, i) => {
        equal(c.rank, i + 1, `candidate event ${i + 1}'s rank`);
        equal(c.text, final.data.response[i], `candidate event ${i + 1}'s text`);
        equal(c.inference_id, final.data.inference_id, `candidate event ${i + 1}'s inference_id`);
      });
      const fills = await page.evaluate(() => window.__fills);
      equal(JSON.stringify(fills.map((f) => f.rank)), JSON.stringify(want.map((_, i) => i + 1)), 'the order the replies were drawn in');
      for (const f of fills) unmoved(at.map((x) => x.box), f.boxes, `when reply ${f.rank} was drawn`);
      console.log(`      (replyd sent ${each.length} candidate events before its candidates event)`);
      await page.click('#cands .cand[data-rank="1"]');
    });

    await step('real replyd, live socket: Listen streams a turn; its slots show at end_of_turn and fill in rank order with the final answer\'s replies', async () => {
      await settings({ count: 4 });
      await page.evaluate(() => { window.__scripted = false; window.__fills = []; });
      const frames = [];
      const onSocket = (ws) => {
        if (!ws.url().includes('/v1/live')) return;
        ws.on('framereceived', (f) => {
          try {
            const ev = JSON.parse(f.payload);
            frames.push(ev);
          } catch { /* not an event */ }
        });
      };
      page.on('websocket', onSocket);
      await page.click('#new-conv');
      await page.click('#listen');
      await until(() => frames.some((f) => f.event === 'end_of_turn'), 'the live turn\'s end', 120000);
      const final = await until(() => frames.find((f) => f.event === 'candidates' && !f.data.no_speech), 'the live turn\'s candidates', 120000);
      const want = final.data.response.filter((r) => r.trim());
      await until(async () => (await slotsNow()).filter((x) => x.text).length === want.length, 'the live replies drawn');
      const s = await slotsNow();
      equal(JSON.stringify(s.filter((x) => x.text).map((x) => x.text)), JSON.stringify(want), 'the live replies drawn, in rank order');
      const eot = frames.findIndex((f) => f.event === 'end_of_turn');
      const each = frames.filter((f) => f.event === 'candidate');
      for (const c of each) {
        check(frames.indexOf(c) > eot && frames.indexOf(c) < frames.indexOf(final), 'a candidate event outside its turn\'s end_of_turn and candidates');
        equal(c.data.text, final.data.response[c.data.rank - 1], `live candidate rank ${c.data.rank}'s text`);
        if (Number.isInteger(final.data.turn)) equal(c.data.turn, final.data.turn, 'the candidate event\'s turn');
      }
      const fills = await page.evaluate(() => window.__fills);
      equal(JSON.stringify(fills.map((f) => f.rank)), JSON.stringify(want.map((_, i) => i + 1)), 'the order the live replies were drawn in');
      for (let i = 1; i < fills.length; i++) unmoved(fills[0].boxes, fills[i].boxes, `when live reply ${fills[i].rank} was drawn`);
      console.log(`      (replyd sent ${each.length} live candidate events before its candidates event)`);
      page.off('websocket', onSocket);
      await until(async () => (await page.getAttribute('#listen', 'aria-pressed')) === 'false', 'listening to stop after one turn');
    });

    await step('no script errors', async () => {
      check(problems.length === 0, problems.join('\n'));
    });
  } catch (err) {
    steps.setupFailed(err);
  }
  return run.finish();
}

await exitWith(main);
