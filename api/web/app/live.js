// Live listening: the microphone streamed to replyd as the partner speaks
// (GET /v1/live, client.md "Live session"). replyd decides when the turn
// ended and answers with events; the page shows them. A LiveSession keeps
// one socket open, reconnects after a network blip or a restart (a new
// one-time ticket each time), and pauses while the tablet speaks.

import { pairing } from './client.js';

const RATE = 16000;
const FRAME = 512; // samples a message: 32 ms, one voice-detection window (docs/live.md)
const KEEPALIVE_MS = 30000;
const BACKOFF_MS = [500, 1000, 2000, 4000, 8000];

/** Close codes after which reconnecting would be refused again. */
const FINAL = new Set([4403, 4401, 4400, 1003, 1008, 1009]);

/** Whether this browser can stream the microphone. */
export function canStream() {
  return Boolean(window.isSecureContext && navigator.mediaDevices && navigator.mediaDevices.getUserMedia
    && typeof WebSocket !== 'undefined' && typeof AudioWorkletNode !== 'undefined');
}

/**
 * A live session. opts.payload() returns the current payload (the dialog so
 * far); opts.onEvent(name, data) gets replyd's events; opts.onState(state,
 * detail) gets 'listening', 'paused', 'reconnecting', 'stopped' (detail:
 * {code, reason} when replyd ended it) and 'error' (detail: the error).
 */
export class LiveSession {
  constructor(opts) {
    // opts.oneTurn: one turn (the page's Listen): a one-turn ticket, no
    // reconnecting; the microphone closes at the turn's end (closeMic) and
    // replyd closes the socket once the turn is answered.
    this.opts = opts;
    this.ws = null;
    this.paused = false;
    this.stopped = true;
    this.tries = 0;
    this.pending = [];
    this.pendingLen = 0;
  }

  /** Opens the microphone and the socket. Rejects when the microphone
   * cannot be opened. */
  async start() {
    this.stopped = false;
    await this.openMic();
    await this.connect();
  }

  /** Closes the microphone and sends no more audio, keeping the socket
   * open for the turn's answer (one-turn listening, at end_of_turn). */
  closeMic() {
    this.micClosed = true;
    this.pending = [];
    this.pendingLen = 0;
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    if (this.ctx) this.ctx.close().catch(() => {});
    this.stream = null;
    this.ctx = null;
  }

  /** Stops listening for good: the socket and the microphone close. */
  stop() {
    this.stopped = true;
    clearTimeout(this.retry);
    clearInterval(this.keepalive);
    if (this.ws) this.ws.close(1000, 'stopped');
    this.ws = null;
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    if (this.ctx) this.ctx.close().catch(() => {});
    this.stream = null;
    this.ctx = null;
    this.opts.onState('stopped');
  }

  /** Stops sending audio (the tablet speaks, the user spells); replyd drops
   * any turn it was hearing. */
  pause() {
    if (this.paused) return;
    this.paused = true;
    this.pending = [];
    this.pendingLen = 0;
    this.control({ type: 'pause' });
    this.opts.onState('paused');
  }

  resume() {
    if (!this.paused) return;
    this.paused = false;
    this.control({ type: 'resume' });
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.opts.onState('listening');
  }

  /** Sends the dialog as it is now: the next turns are answered with it. */
  updatePayload() {
    this.control({ type: 'payload', payload: this.opts.payload() });
  }

  control(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  async openMic() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    try {
      this.ctx = new AudioContext({ sampleRate: RATE });
    } catch {
      this.ctx = new AudioContext();
    }
    await this.ctx.audioWorklet.addModule(new URL('wav-worklet.js', import.meta.url));
    const source = this.ctx.createMediaStreamSource(this.stream);
    const node = new AudioWorkletNode(this.ctx, 'pcm-capture');
    const mute = this.ctx.createGain();
    mute.gain.value = 0;
    source.connect(node);
    node.connect(mute).connect(this.ctx.destination); // keeps the node pulled, silently
    const ratio = this.ctx.sampleRate / RATE;
    let phase = 0;
    node.port.onmessage = (ev) => {
      if (this.paused || this.micClosed || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
      let x = ev.data;
      if (ratio !== 1) {
        // Linear resampling to 16 kHz when the context runs at another rate.
        const out = [];
        for (; phase < x.length - 1; phase += ratio) {
          const i = Math.floor(phase);
          const f = phase - i;
          out.push(x[i] * (1 - f) + x[i + 1] * f);
        }
        phase -= x.length - 1;
        x = Float32Array.from(out);
      }
      this.pending.push(x);
      this.pendingLen += x.length;
      if (this.pendingLen >= FRAME) this.flush();
    };
  }

  /** Sends the samples gathered as one message of 16-bit PCM. */
  flush() {
    const pcm = new Int16Array(this.pendingLen);
    let o = 0;
    for (const c of this.pending) {
      for (const v of c) {
        const s = Math.max(-1, Math.min(1, v));
        pcm[o++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      }
    }
    this.pending = [];
    this.pendingLen = 0;
    this.ws.send(pcm.buffer);
  }

  async connect() {
    if (this.stopped) return;
    let url;
    try {
      const res = await fetch(this.opts.oneTurn ? '/v1/live/ticket?turns=1' : '/v1/live/ticket', {
        method: 'POST', credentials: 'omit', cache: 'no-store',
        headers: { 'X-API-KEY': pairing.key() || '', Accept: 'application/json' },
      });
      const body = await res.json().catch(() => ({}));
      if (!res.ok) {
        const err = new Error(body.message || `HTTP ${res.status}`);
        err.status = res.status;
        err.code = body.error;
        // Refused for good (switched off, no key): stop; else try again.
        if (res.status === 401 || res.status === 403) {
          this.opts.onState('error', err);
          this.stop();
          return;
        }
        throw err;
      }
      url = body.url;
    } catch (err) {
      this.reconnect(err);
      return;
    }
    const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + url);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.tries = 0;
      ws.send(JSON.stringify(this.opts.payload()));
      if (this.paused) ws.send(JSON.stringify({ type: 'pause' }));
      clearInterval(this.keepalive);
      this.keepalive = setInterval(() => this.control({ type: 'ping' }), KEEPALIVE_MS);
      this.opts.onState(this.paused ? 'paused' : 'listening');
    };
    ws.onmessage = (m) => {
      if (typeof m.data !== 'string') return;
      let ev;
      try { ev = JSON.parse(m.data); } catch { return; }
      if (ev && typeof ev.event === 'string') this.opts.onEvent(ev.event, ev.data || {});
    };
    ws.onclose = (ev) => {
      clearInterval(this.keepalive);
      if (this.ws !== ws || this.stopped) return;
      this.ws = null;
      if (this.opts.oneTurn) {
        // The turn was answered (1000), or the socket was lost: a turn
        // cannot be picked up on another socket.
        this.opts.onState('stopped', ev.code === 1000 ? {} : { code: ev.code, reason: ev.reason || 'the connection was lost' });
        this.stop();
        return;
      }
      if (FINAL.has(ev.code)) {
        this.opts.onState('stopped', { code: ev.code, reason: ev.reason });
        this.stop();
        return;
      }
      this.reconnect();
    };
  }

  /** Tries again after a back-off: a blip, a restart, a box that went away. */
  reconnect() {
    if (this.stopped) return;
    this.opts.onState('reconnecting');
    const wait = BACKOFF_MS[Math.min(this.tries, BACKOFF_MS.length - 1)];
    this.tries++;
    clearTimeout(this.retry);
    this.retry = setTimeout(() => this.connect(), wait);
  }
}

/** How long the tablet may take to speak text at rate, when the browser
 * never reports the end: about 15 characters a second at rate 1, plus 1.5 s. */
export function speakingMs(text, rate = 1) {
  return 1500 + (text.length * 1000) / (15 * (rate || 1));
}
