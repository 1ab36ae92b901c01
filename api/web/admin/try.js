// Try it view: pick a key, type a dialog, add the partner's speech (recorded
// or uploaded), and see the transcript, the candidates and the stage timings.
import { api } from './api.js';
import { $, h, showError, fmtInt, fmtBytes } from './util.js';
import { t } from '../app/i18n/i18n.js';

const roles = [['speaker', 'admin.rolePartner'], ['disabled_person', 'admin.roleUser']];
const stages = [['decode', 'admin.stageDecode'], ['stt', 'admin.engineStt'], ['prompt', 'admin.stagePrompt'],
  ['queue', 'admin.stageQueue'], ['generation', 'admin.stageGeneration'], ['total', 'admin.stageTotal']];

let audio = null; // {blob, name}
let recorder = null;
let recTimer = 0;
let turnSeq = 0;

function addTurn(role = 'speaker', text = '') {
  const n = ++turnSeq;
  const li = h('li', { class: 'turn' },
    h('label', { for: `turn-role-${n}`, class: 'sr-only', text: t('admin.whoSpeaks') }),
    h('select', { id: `turn-role-${n}`, class: 'turn-role' },
      roles.map(([v, key]) => h('option', { value: v, selected: v === role, text: t(key) }))),
    h('label', { for: `turn-text-${n}`, class: 'sr-only', text: t('admin.whatTheySay') }),
    h('input', { id: `turn-text-${n}`, class: 'turn-text grow', value: text, autocomplete: 'off' }),
    h('button', { type: 'button', class: 'small quiet', text: t('admin.remove'), 'aria-label': t('admin.removeTurn'),
      onclick: () => {
        const next = li.nextElementSibling || li.previousElementSibling;
        li.remove();
        (next ? next.querySelector('input') : $('#try-add')).focus();
      } }),
  );
  $('#try-turns').append(li);
  return li;
}

let blobMedia = null; // whether the page's CSP lets <audio> play blob: URLs

/** Reads the page's own CSP: a player for the audio only where it is allowed. */
async function canPlayBlobs() {
  if (blobMedia === null) {
    try {
      const r = await fetch(location.pathname, { cache: 'no-store', credentials: 'omit' });
      const csp = r.headers.get('Content-Security-Policy') || '';
      const dirs = new Map(csp.split(';').map((d) => d.trim().split(/\s+/)).filter((d) => d[0]).map((d) => [d[0].toLowerCase(), d.slice(1)]));
      const src = dirs.get('media-src') || dirs.get('default-src');
      blobMedia = !src || src.includes('blob:');
    } catch {
      blobMedia = false;
    }
  }
  return blobMedia;
}

async function setAudio(blob, name) {
  const el = $('#try-audio');
  if (el.src) URL.revokeObjectURL(el.src);
  el.removeAttribute('src');
  el.hidden = true;
  audio = blob ? { blob, name } : null;
  $('#try-audio-row').hidden = !blob;
  $('#try-audio-info').textContent = blob ? `${name}, ${fmtBytes(blob.size)}` : '';
  if (blob && (await canPlayBlobs()) && audio && audio.blob === blob) {
    el.src = URL.createObjectURL(blob);
    el.hidden = false;
  }
}

async function loadKeys() {
  const sel = $('#try-key');
  const keep = sel.value;
  try {
    const r = await api('GET', '/v1/admin/keys', { query: { limit: 500 } });
    const items = ((r && r.items) || []).filter((k) => k.Status === 'active');
    sel.replaceChildren(...(items.length
      ? items.map((k) => h('option', { value: k.APIKeyHash, selected: k.APIKeyHash === keep, text: `${k.ClientID} (${k.APIKeyHash.slice(0, 8)})` }))
      : [h('option', { value: '', text: t('admin.noActiveKey') })]));
  } catch (err) {
    showError($('#try-error'), err);
  }
}

function recState(text) {
  $('#try-rec-state').textContent = text;
}

async function startRecording() {
  if (!navigator.mediaDevices || !window.MediaRecorder) {
    recState(t('admin.recordingNeeds'));
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    recState(t('admin.noMicrophone'));
    return;
  }
  const type = MediaRecorder.isTypeSupported('audio/webm;codecs=opus') ? 'audio/webm;codecs=opus' : '';
  recorder = new MediaRecorder(stream, type ? { mimeType: type } : undefined);
  const chunks = [];
  recorder.addEventListener('dataavailable', (ev) => { if (ev.data.size) chunks.push(ev.data); });
  recorder.addEventListener('stop', () => {
    stream.getTracks().forEach((track) => track.stop());
    clearInterval(recTimer);
    $('#try-rec-time').textContent = '';
    const blob = new Blob(chunks, { type: recorder.mimeType || 'audio/webm' });
    recorder = null;
    $('#try-rec').disabled = false;
    $('#try-stop').disabled = true;
    $('#try-file').value = '';
    setAudio(blob, 'recording.webm');
    recState(t('admin.recordingDone'));
    $('#try-rec').focus();
  });
  recorder.start();
  const t0 = Date.now();
  const clock = $('#try-rec-time');
  const tick = () => {
    const s = Math.floor((Date.now() - t0) / 1000);
    clock.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
  };
  tick();
  recTimer = setInterval(tick, 1000);
  recState(t('admin.recordingNow'));
  $('#try-rec').disabled = true;
  $('#try-stop').disabled = false;
  $('#try-stop').focus();
}

function stopRecording() {
  return new Promise((resolve) => {
    if (!recorder) { resolve(); return; }
    recorder.addEventListener('stop', () => setTimeout(resolve), { once: true });
    recorder.stop();
  });
}

function payload() {
  const messages = [];
  for (const li of $('#try-turns').children) {
    const content = li.querySelector('.turn-text').value.trim();
    if (content) messages.push({ role: li.querySelector('.turn-role').value, content });
  }
  if (audio) messages.push({ role: 'speaker', content: '', audio: true });
  const p = { messages, options: {} };
  const lang = $('#try-lang').value.trim();
  if (lang) p.language = lang;
  const max = parseInt($('#try-max').value, 10);
  if (max > 0) p.options.max_candidates = max;
  const temp = parseFloat($('#try-temp').value);
  if (Number.isFinite(temp)) p.options.temperature = temp;
  return p;
}

async function run(ev) {
  ev.preventDefault();
  showError($('#try-error'), null);
  await stopRecording();
  const key = $('#try-key').value;
  if (!key) {
    showError($('#try-error'), new Error(t('admin.pickKey')));
    $('#try-key').focus();
    return;
  }
  const p = payload();
  if (!p.messages.length) {
    showError($('#try-error'), new Error(t('admin.needTurn')));
    return;
  }
  const form = new FormData();
  form.append('payload', JSON.stringify(p));
  form.append('api_key_hash', key);
  if (audio) form.append('audio', audio.blob, audio.name);
  const btn = $('#try-run');
  btn.disabled = true;
  btn.setAttribute('aria-busy', 'true');
  const label = btn.textContent;
  btn.textContent = t('admin.working');
  try {
    const r = await api('POST', '/v1/admin/try', { form });
    render(r, Boolean(audio));
  } catch (err) {
    showError($('#try-error'), err);
  } finally {
    btn.disabled = false;
    btn.removeAttribute('aria-busy');
    btn.textContent = label;
  }
}

function render(r, hadAudio) {
  const tr = $('#try-transcript');
  const text = r.transcript || '';
  tr.textContent = text || (hadAudio ? t('admin.nothingRecognised') : t('admin.noAudioSent'));
  tr.classList.toggle('empty', !text);
  const cands = r.candidates && r.candidates.length
    ? r.candidates.slice().sort((a, b) => (a.rank ?? 0) - (b.rank ?? 0))
    : (r.response || []).map((text) => ({ text }));
  $('#try-candidates').replaceChildren(...(cands.length
    ? cands.map((c) => h('li', {}, h('span', { class: 'cand', text: c.text }),
      c.language ? h('span', { class: 'hint', text: ` ${c.language}` }) : ''))
    : [h('li', { class: 'empty', text: t('admin.noCandidates') })]));
  const ms = r.timings_ms || {};
  const total = ms.total || 0;
  $('#try-timings tbody').replaceChildren(...stages.filter(([k]) => k in ms).map(([k, name]) => h('tr', { 'data-stage': k },
    h('th', { scope: 'row', text: t(name) }),
    h('td', { class: 'num', text: fmtInt(ms[k]) }),
    h('td', {}, k === 'total' ? '' : h('meter', { min: 0, max: total || 1, value: ms[k] || 0, 'aria-hidden': 'true' })),
  )));
  const box = $('#try-result');
  box.hidden = false;
  box.focus();
}

let limitsApplied = false;

/** Bounds the candidate count by the server's limits, once. */
async function applyLimits() {
  if (limitsApplied) return;
  try {
    const s = await api('GET', '/v1/admin/status');
    const l = (s && s.limits) || {};
    const input = $('#try-max');
    if (l.max_candidates) input.max = l.max_candidates;
    if (l.default_candidates) input.value = Math.min(l.default_candidates, l.max_candidates || Infinity);
    limitsApplied = true;
  } catch { /* the form still works with its own bounds */ }
}

export default {
  init() {
    addTurn('speaker', t('admin.sampleTurn1'));
    addTurn('disabled_person', t('admin.sampleTurn2'));
    $('#try-add').addEventListener('click', () => addTurn(
      $('#try-turns').lastElementChild?.querySelector('.turn-role').value === 'speaker' ? 'disabled_person' : 'speaker',
    ).querySelector('input').focus());
    $('#try-file').addEventListener('change', () => {
      const f = $('#try-file').files[0];
      setAudio(f || null, f ? f.name : '');
      recState('');
    });
    $('#try-audio-clear').addEventListener('click', () => {
      $('#try-file').value = '';
      setAudio(null);
      recState('');
      $('#try-file').focus();
    });
    $('#try-rec').addEventListener('click', startRecording);
    $('#try-stop').addEventListener('click', stopRecording);
    $('#try-form').addEventListener('submit', run);
  },
  enter() {
    loadKeys();
    applyLimits();
  },
  leave() {
    if (recorder) stopRecording();
  },
};
