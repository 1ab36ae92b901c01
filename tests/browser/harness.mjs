// What the browser test scripts (run.mjs for the admin page, app.mjs for the
// conversation page) share: the start and end of a run, assertions,
// polling, steps that stop at the first failure and the summary line, free
// ports, the real replyd process and Chromium's flags.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

/** The start of a script's run: bin and Chromium must exist, artifacts is
 * emptied, a temp dir made and replyd's demo models written into it (llm,
 * whisper: their paths). When any of that fails it prints why and the
 * summary line ("<label>: 0 passed, 1 failed") and returns null. finish
 * runs cleanups, newest first, removes the temp dir, prints the steps'
 * summary line and returns the exit status. */
export function begin(label, steps, bin, chromiumPath, artifacts) {
  for (const [f, what] of [[bin, 'run "make build" first'], [chromiumPath, 'run scripts/deps.sh (Debian package chromium)']]) {
    if (!fs.existsSync(f)) {
      console.error(`${label}: ${f} is missing; ${what}`);
      console.log(`${label}: 0 passed, 1 failed`);
      return null;
    }
  }
  fs.rmSync(artifacts, { recursive: true, force: true });
  fs.mkdirSync(artifacts, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `replyd-${label}-`));
  const cleanups = [];
  const run = {
    tmp,
    cleanups,
    async finish() {
      for (const c of cleanups.reverse()) {
        try { await c(); } catch (err) { console.error(`cleanup: ${err.message}`); }
      }
      fs.rmSync(tmp, { recursive: true, force: true });
      return steps.summary(label, artifacts);
    },
  };
  try {
    const models = path.join(tmp, 'models');
    execFileSync(bin, ['models', 'demo', '--dir', models], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 300000 });
    run.llm = path.join(models, 'llm-demo.gguf');
    run.whisper = path.join(models, 'whisper-demo.bin');
    check(fs.existsSync(run.llm) && fs.existsSync(run.whisper), `replyd models demo did not write ${run.llm} and ${run.whisper}`);
  } catch (err) {
    steps.setupFailed(err);
    fs.rmSync(tmp, { recursive: true, force: true });
    steps.summary(label, artifacts);
    return null;
  }
  return run;
}

/** Headless Chromium's flags for both scripts, a fake microphone (that
 * needs no permission prompt) included. */
export const chromiumArgs = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run',
  '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
  // The pages follow the browser's language: these tests read English.
  '--lang=en-US'];

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

export function equal(got, want, what) {
  if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

/** Polls fn every everyMs until it returns a truthy value (returned) or
 * timeoutMs have passed (an error naming what was awaited). */
export async function poll(fn, what, timeoutMs, everyMs) {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

const indent = (err) => String((err && err.stack) || err).split('\n').join('\n      ');

/** Steps that build on each other: after the first failure (which gets a
 * screenshot through shot) the rest are listed as not run. */
export class Steps {
  constructor(shot) {
    this.shot = shot;
    this.results = [];
    this.notRun = [];
    this.stopped = false;
  }

  async step(name, fn) {
    if (this.stopped) {
      this.notRun.push(name);
      return;
    }
    const t0 = Date.now();
    try {
      await fn();
      this.results.push({ name, ok: true });
      console.log(`ok    ${name} (${Date.now() - t0} ms)`);
    } catch (err) {
      this.results.push({ name, ok: false });
      console.log(`FAIL  ${name} (${Date.now() - t0} ms)\n      ${indent(err)}`);
      await this.shot(`FAILED-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`).catch(() => {});
      this.stopped = true;
    }
  }

  /** Records a failure outside the steps (starting the processes). */
  setupFailed(err) {
    this.results.push({ name: 'setup', ok: false });
    console.log(`FAIL  setup\n      ${indent(err)}`);
  }

  /** Prints the summary line "<label>: N passed, M failed" and returns the
   * exit status. */
  summary(label, artifacts) {
    const passed = this.results.filter((r) => r.ok).length;
    const failed = this.results.length - passed + this.notRun.length;
    if (this.notRun.length) console.log(`not run after the failure: ${this.notRun.join('; ')}`);
    console.log(`screenshots and replyd.log: ${path.relative(process.cwd(), artifacts) || '.'}/`);
    console.log(`${label}: ${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
  }
}

/** Runs main and sets the exit status to what it returns (1 if it throws). */
export async function exitWith(main) {
  let code = 1;
  try {
    code = await main();
  } finally {
    process.exitCode = code;
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Starts `bin serve` with env (and none of this process's REPLYD_*
 * variables), output to logFile, and waits until /healthz answers 200
 * {"status":"ok"} (at most readyMs: a benchmark's real-sized models load
 * and time their decoding for longer on a loaded box). */
export async function startReplyd(bin, env, logFile, readyMs = 120000) {
  const out = fs.openSync(logFile, 'w');
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('REPLYD_')));
  const child = spawn(bin, ['serve'], { env: { ...clean, ...env }, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });
  const base = `http://${env.REPLYD_ADDR}`;
  const tail = () => fs.readFileSync(logFile, 'utf8').split('\n').slice(-25).join('\n');
  // REPLYD_READY_S: a box loaded by other work may need longer.
  if (process.env.REPLYD_READY_S) readyMs = Number(process.env.REPLYD_READY_S) * 1000;
  const end = Date.now() + readyMs;
  for (;;) {
    if (exited) throw new Error(`replyd exited (${exited.code ?? exited.signal}) before it was ready:\n${tail()}`);
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.status === 200 && (await r.json()).status === 'ok') break;
    } catch { /* not listening yet */ }
    if (Date.now() > end) {
      child.kill('SIGKILL');
      throw new Error(`replyd did not answer /healthz 200 {"status":"ok"} within ${readyMs / 1000} s:\n${tail()}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    base,
    log: () => fs.readFileSync(logFile, 'utf8'),
    async stop() {
      if (exited) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** Makes an API key on the replyd at base (the admin's key adminKey) for
 * clientId, with a rate limit that a test's turns do not reach; returns it. */
export async function apiKeyFor(base, adminKey, clientId) {
  const kr = await fetch(`${base}/v1/admin/keys`, {
    method: 'POST',
    headers: { 'X-ADMIN-KEY': adminKey, 'Content-Type': 'application/json' },
    body: JSON.stringify({ client_id: clientId, rate_limit_per_minute: 1000 }),
  });
  check(kr.status === 201 || kr.status === 200, `creating the API key: status ${kr.status}`);
  return (await kr.json()).api_key;
}

let axeSource = null;

/** axe-core on page p as it is: no violation of any rule (the error names
 * each rule and up to four of its elements, and where: what the page was
 * doing). */
export async function axeClean(p, where) {
  if (!axeSource) axeSource = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  if (!(await p.evaluate(() => typeof window.axe !== 'undefined'))) await p.evaluate(axeSource);
  const violations = await p.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => `${v.id} (${v.impact}): ${v.help}\n        ${v.nodes.slice(0, 4).map((n) => n.target.join(' ')).join('\n        ')}`);
  });
  check(violations.length === 0, `axe found violations ${where}:\n      ${violations.join('\n      ')}`);
}
