// Recording the partner: WebM/Opus through MediaRecorder where the browser
// has it, else 16-bit WAV from an AudioWorklet. A level meter ends the
// recording after SILENCE_MS of quiet once speech was heard, or when nothing
// was heard for NOTHING_MS, or at MAX_MS.

const SILENCE_MS = 1500;
const NOTHING_MS = 10000;
const MAX_MS = 60000;
// RMS level above which the microphone is taken to hear speech (about
// -40 dBFS), and the time above it that counts as speech.
const SPEECH_RMS = 0.01;
const SPEECH_MIN_MS = 150;
const TICK_MS = 50;

/** Whether this browser can record at all (a secure context is needed). */
export function canRecord() {
  return Boolean(window.isSecureContext && navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
}

const OPUS = 'audio/webm;codecs=opus';

/**
 * Starts recording. opts.format: '' (automatic) or 'wav'; opts.onAutoStop:
 * called with 'silence', 'nothing' or 'max' when the recording ended by
 * itself. Resolves to a recording whose stop() resolves to {blob, filename,
 * type, heard} and whose cancel() discards it.
 */
export async function startRecording(opts = {}) {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  const useOpus = opts.format !== 'wav' && typeof MediaRecorder !== 'undefined' && MediaRecorder.isTypeSupported(OPUS);
  let ctx;
  try {
    ctx = new AudioContext(useOpus ? {} : { sampleRate: 16000 });
  } catch {
    ctx = new AudioContext();
  }
  const source = ctx.createMediaStreamSource(stream);
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 2048;
  source.connect(analyser);

  let capture;
  if (useOpus) {
    capture = opusCapture(stream);
  } else {
    capture = await wavCapture(ctx, source);
  }

  // The level meter.
  const buf = new Float32Array(analyser.fftSize);
  const started = performance.now();
  let speechMs = 0;
  let quietSince = started;
  let heard = false;
  let ended = false;
  const timer = setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const v of buf) sum += v * v;
    const rms = Math.sqrt(sum / buf.length);
    const now = performance.now();
    if (rms > SPEECH_RMS) {
      speechMs += TICK_MS;
      quietSince = now;
      if (speechMs >= SPEECH_MIN_MS) heard = true;
    }
    let why = '';
    if (heard && now - quietSince >= SILENCE_MS) why = 'silence';
    else if (!heard && now - started >= NOTHING_MS) why = 'nothing';
    else if (now - started >= MAX_MS) why = 'max';
    if (why && !ended && opts.onAutoStop) {
      ended = true;
      opts.onAutoStop(why);
    }
  }, TICK_MS);

  const release = () => {
    clearInterval(timer);
    for (const t of stream.getTracks()) t.stop();
    ctx.close().catch(() => {});
  };

  return {
    async stop() {
      ended = true;
      const out = await capture.stop();
      release();
      return { ...out, heard };
    },
    cancel() {
      ended = true;
      capture.cancel();
      release();
    },
  };
}

function opusCapture(stream) {
  const rec = new MediaRecorder(stream, { mimeType: OPUS, audioBitsPerSecond: 32000 });
  const chunks = [];
  rec.ondataavailable = (ev) => { if (ev.data && ev.data.size) chunks.push(ev.data); };
  rec.start(250);
  return {
    stop: () => new Promise((resolve) => {
      rec.onstop = () => resolve({ blob: new Blob(chunks, { type: 'audio/webm' }), filename: 'partner.webm', type: 'audio/webm' });
      rec.stop();
    }),
    cancel() {
      rec.onstop = null;
      if (rec.state !== 'inactive') rec.stop();
    },
  };
}

async function wavCapture(ctx, source) {
  await ctx.audioWorklet.addModule(new URL('wav-worklet.js', import.meta.url));
  const node = new AudioWorkletNode(ctx, 'pcm-capture');
  const mute = ctx.createGain();
  mute.gain.value = 0;
  source.connect(node);
  node.connect(mute).connect(ctx.destination); // keeps the node pulled, silently
  const chunks = [];
  node.port.onmessage = (ev) => chunks.push(ev.data);
  const rate = ctx.sampleRate;
  return {
    async stop() {
      node.port.onmessage = null;
      source.disconnect(node);
      const blob = new Blob([encodeWAV(chunks, rate)], { type: 'audio/wav' });
      return { blob, filename: 'partner.wav', type: 'audio/wav' };
    },
    cancel() {
      node.port.onmessage = null;
    },
  };
}

/** Encodes float samples as a 16-bit mono PCM WAV file. */
export function encodeWAV(chunks, rate) {
  const n = chunks.reduce((s, c) => s + c.length, 0);
  const out = new DataView(new ArrayBuffer(44 + n * 2));
  const str = (o, s) => { for (let i = 0; i < s.length; i++) out.setUint8(o + i, s.charCodeAt(i)); };
  str(0, 'RIFF');
  out.setUint32(4, 36 + n * 2, true);
  str(8, 'WAVE');
  str(12, 'fmt ');
  out.setUint32(16, 16, true);
  out.setUint16(20, 1, true); // PCM
  out.setUint16(22, 1, true); // mono
  out.setUint32(24, rate, true);
  out.setUint32(28, rate * 2, true);
  out.setUint16(32, 2, true);
  out.setUint16(34, 16, true);
  str(36, 'data');
  out.setUint32(40, n * 2, true);
  let o = 44;
  for (const c of chunks) {
    for (const v of c) {
      const s = Math.max(-1, Math.min(1, v));
      out.setInt16(o, s < 0 ? s * 0x8000 : s * 0x7fff, true);
      o += 2;
    }
  }
  return out.buffer;
}
