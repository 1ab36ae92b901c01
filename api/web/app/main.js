// The replyd conversation page: the AAC user's screen. The partner's turn
// comes from a recording (Listen) or is typed; replyd suggests replies; the
// one the user picks is spoken and becomes the user's turn.
import { pair, pairing, infer, feedback, health, randomId, ReplydError, INFER_TIMEOUT_MS } from './client.js';
import { canRecord, startRecording } from './recorder.js';
import * as settings from './settings.js';
import { speak, voices, onVoicesChanged } from './speech.js';
import { scanner, dweller } from './access.js';

const $ = (sel) => document.querySelector(sel);

const state = {
  s: settings.load(),
  history: [], // {role, content}
  dialogId: randomId(),
  step: 0,
  recording: null, // the recording in progress
  request: null, // {controller, id, timer} of the inference in flight
  answer: null, // {inferenceId, shownAt, candidates}
  reachable: true,
};

// ------------------------------------------------------------ conversation

function addTurn(role, content) {
  state.history.push({ role, content });
  const who = role === 'speaker' ? 'Partner' : (state.s.name || 'You');
  const li = document.createElement('li');
  li.className = `bubble ${role === 'speaker' ? 'partner' : 'user'}`;
  li.dataset.role = role;
  const label = document.createElement('span');
  label.className = 'who';
  label.textContent = who;
  const text = document.createElement('span');
  text.className = 'text';
  text.textContent = content;
  li.append(label, text);
  const log = $('#log');
  log.append(li);
  $('#log-empty').hidden = true;
  log.scrollTop = log.scrollHeight;
}

function notice(text) {
  $('#notice').textContent = text;
}

function showCandidates(list, inferenceId) {
  const ul = $('#cands');
  ul.replaceChildren();
  list.forEach((text, i) => {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'cand';
    b.textContent = text;
    b.dataset.rank = String(i + 1);
    b.setAttribute('data-scan', '');
    b.setAttribute('data-dwell', '');
    b.addEventListener('click', () => choose(text, i + 1));
    li.append(b);
    ul.append(li);
  });
  $('#cands-wrap').hidden = list.length === 0;
  $('#none-fit').disabled = list.length === 0;
  state.answer = list.length ? { inferenceId, shownAt: performance.now(), candidates: list } : null;
  access.rescan();
}

function clearCandidates() {
  $('#cands').replaceChildren();
  $('#cands-wrap').hidden = true;
  $('#none-fit').disabled = true;
}

/** The user picked candidate rank: speak it, add it, report it. */
function choose(text, rank) {
  const a = state.answer;
  say(text);
  if (a) {
    feedback({ inference_id: a.inferenceId, chosen_rank: rank, time_to_choice_ms: Math.round(performance.now() - a.shownAt) });
  }
  state.answer = null;
  clearCandidates();
  notice('');
}

/** Speaks text as the user's turn and adds it to the conversation. */
function say(text) {
  if (!speak(text, state.s)) notice('This browser cannot speak: the reply is shown only.');
  addTurn('disabled_person', text);
}

function noneFit() {
  const a = state.answer;
  if (a) {
    // Reported at once; what the user then types replaces it (with none_fit).
    a.noneFit = true;
    feedback({ inference_id: a.inferenceId, none_fit: true, time_to_choice_ms: Math.round(performance.now() - a.shownAt) });
  }
  clearCandidates();
  openCompose('type');
}

function typedReply(ev) {
  ev.preventDefault();
  const text = $('#type-text').value.trim();
  if (!text) return;
  const a = state.answer;
  if (a) {
    const report = { inference_id: a.inferenceId, spoken_text: text, time_to_choice_ms: Math.round(performance.now() - a.shownAt) };
    if (a.noneFit) report.none_fit = true;
    feedback(report);
  }
  state.answer = null;
  clearCandidates();
  $('#type-text').value = '';
  closeCompose();
  say(text);
}

function partnerTyped(ev) {
  ev.preventDefault();
  const text = $('#partner-text').value.trim();
  if (!text) return;
  $('#partner-text').value = '';
  closeCompose();
  addTurn('speaker', text);
  suggest(null);
}

function openCompose(which) {
  closeCompose();
  const form = $(`#${which}-form`);
  form.hidden = false;
  form.querySelector('input').focus();
  access.rescan();
}

function closeCompose() {
  $('#type-form').hidden = true;
  $('#partner-form').hidden = true;
  access.rescan();
}

function newConversation() {
  abortRequest('new');
  if (state.recording) {
    state.recording.cancel();
    state.recording = null;
    setListening(false);
  }
  state.history = [];
  state.dialogId = randomId();
  state.step = 0;
  state.answer = null;
  $('#log').replaceChildren();
  $('#log-empty').hidden = false;
  clearCandidates();
  closeCompose();
  notice('New conversation.');
}

// ------------------------------------------------------------ recording

function setListening(on) {
  const b = $('#listen');
  b.setAttribute('aria-pressed', on ? 'true' : 'false');
  b.textContent = on ? 'Stop' : 'Listen';
}

/** Listen: starts a recording (cancelling any request in flight), or stops
 * the one in progress. */
async function listen() {
  if (state.recording) {
    await finishRecording();
    return;
  }
  if (!canRecord()) {
    notice(window.isSecureContext ? 'This browser cannot record sound.' : 'The microphone needs HTTPS: see the note at the top.');
    return;
  }
  abortRequest('listen');
  clearCandidates();
  notice('');
  try {
    state.recording = await startRecording({
      format: state.s.format,
      onAutoStop: (why) => finishRecording(why),
    });
  } catch (err) {
    state.recording = null;
    notice(err && err.name === 'NotAllowedError'
      ? 'The microphone is blocked: allow it for this page in the browser settings.'
      : 'The microphone could not be opened.');
    return;
  }
  setListening(true);
  progress('Listening… tap Stop when your partner has finished.', true);
}

async function finishRecording(why) {
  const rec = state.recording;
  if (!rec) return;
  state.recording = null;
  setListening(false);
  const audio = await rec.stop();
  if (why === 'nothing' || !audio.heard) {
    progress(null);
    notice("Didn't catch that: nothing was heard. Tap Listen and try again.");
    return;
  }
  suggest(audio);
}

// ------------------------------------------------------------ inference

function progress(text, cancellable = true) {
  $('#progress').hidden = !text;
  $('#progress-text').textContent = text || '';
  $('#cancel').hidden = !cancellable;
  access.rescan();
}

function abortRequest(reason) {
  const r = state.request;
  if (!r) return;
  state.request = null;
  clearTimeout(r.timer);
  r.controller.abort(reason);
  progress(null);
}

function payloadFor(withAudio) {
  const s = state.s;
  const p = {
    messages: state.history.map((m) => ({ role: m.role, content: m.content })),
    dialog_id: state.dialogId,
    step_id: String(++state.step),
    options: { max_candidates: s.count },
  };
  if (withAudio) p.messages.push({ role: 'speaker', audio: true });
  if (s.biography) p.disabled_person_biography = s.biography;
  if (s.persona) p.persona = s.persona;
  if (s.name) p.user_profile = `Name: ${s.name}`;
  if (s.language) p.language = s.language;
  if (s.user_id) {
    p.user_id = s.user_id;
    if (s.remember) p.remember = true;
  }
  return p;
}

/** Asks replyd for replies to the dialog, with the partner's recording when
 * audio is given. A newer request or a recording cancels it. */
async function suggest(audio) {
  abortRequest('replaced');
  const controller = new AbortController();
  const id = randomId(8);
  const r = { controller, id, timer: setTimeout(() => controller.abort('timeout'), INFER_TIMEOUT_MS) };
  state.request = r;
  progress(audio ? 'Sending… then transcribing and suggesting replies.' : 'Suggesting replies…');
  const current = () => state.request === r;
  try {
    const res = await infer({
      payload: payloadFor(Boolean(audio)),
      audio,
      signal: controller.signal,
      requestId: id,
      onTranscript: (t, ev) => {
        if (!current() || !audio) return;
        if (t && !(ev && ev.no_speech)) progress(`Partner: “${t}”. Suggesting replies…`);
      },
    });
    if (!current()) return;
    state.request = null;
    clearTimeout(r.timer);
    progress(null);
    if (audio) {
      const t = (res.transcript || '').trim();
      if (res.no_speech || !t) {
        notice("Didn't catch that. Tap Listen and try again, or Partner types.");
        return;
      }
      addTurn('speaker', t);
    }
    const list = Array.isArray(res.response) ? res.response.filter((x) => typeof x === 'string' && x.trim()) : [];
    if (!list.length) {
      notice('No replies were suggested. Type your own, or try again.');
      return;
    }
    notice('');
    setReachable(true);
    showCandidates(list, res.inference_id);
    const first = $('#cands button');
    if (first && !access.scanning()) first.focus();
  } catch (err) {
    if (!current()) return; // replaced or cancelled on purpose
    state.request = null;
    clearTimeout(r.timer);
    progress(null);
    if (controller.signal.aborted) {
      notice(controller.signal.reason === 'timeout' ? 'replyd took too long to answer. Try again.' : 'Cancelled.');
      return;
    }
    showError(err);
  }
}

function showError(err) {
  if (!(err instanceof ReplydError)) {
    notice('Something went wrong. Try again.');
    return;
  }
  if (err.status === 0) {
    setReachable(false);
    notice('replyd is not reachable. Try again when it is back.');
  } else if (err.status === 401) {
    pairing.forget();
    showView();
    $('#pair-error').textContent = `${err.message} Pair this tablet again.`;
  } else if (err.retryAfter) {
    notice(`${err.message} (retry in ${err.retryAfter} s)`);
  } else {
    notice(err.message);
  }
}

// ------------------------------------------------------------ reachability

function setReachable(ok, text) {
  state.reachable = ok;
  const b = $('#banner-offline');
  b.hidden = ok && !text;
  b.textContent = text || (ok ? '' : 'replyd is not reachable. Check that the replyd box is on and that this tablet is on the clinic network; this page keeps trying.');
}

async function checkHealth() {
  try {
    const h = await health();
    if (h.status === 'loading') setReachable(true, 'replyd is starting: its models are loading. Suggestions work in a moment.');
    else if (h.status === 'error') setReachable(true, 'replyd cannot suggest replies: a model failed to load. Tell the administrator.');
    else setReachable(true);
  } catch {
    setReachable(false);
  }
  setTimeout(checkHealth, state.reachable && $('#banner-offline').hidden ? 30000 : 5000);
}

// ------------------------------------------------------------ pairing

function showView() {
  const paired = Boolean(pairing.key());
  $('#view-pair').hidden = paired;
  $('#view-talk').hidden = !paired;
  $('#new-conv').hidden = !paired;
  $('#s-unpair').hidden = !paired;
  access.rescan();
}

async function redeem(code) {
  const btn = $('#pair-submit');
  $('#pair-error').textContent = '';
  $('#pair-msg').textContent = 'Pairing…';
  btn.disabled = true;
  try {
    const r = await pair(code);
    $('#pair-code').value = '';
    $('#pair-msg').textContent = '';
    showView();
    notice(`This tablet is paired${r.clientId ? ` as ${r.clientId}` : ''}. Tap Listen when your partner speaks.`);
    $('#listen').focus();
  } catch (err) {
    $('#pair-msg').textContent = '';
    const msg = err.status === 0 ? 'replyd is not reachable: check the network and try again.' : err.message;
    $('#pair-error').textContent = err.retryAfter ? `${msg} (retry in ${err.retryAfter} s)` : msg;
    $('#pair-code').focus();
  } finally {
    btn.disabled = false;
  }
}

/** A pairing link (/app/#pair=CODE) redeems its code at once; the code
 * leaves the address bar and the history. */
function pairFromLink() {
  const m = location.hash.match(/^#pair=([A-Za-z0-9-]{1,32})$/);
  if (!m) return;
  history.replaceState(null, '', location.pathname + location.search);
  if (pairing.key()) pairing.forget();
  showView();
  redeem(m[1]);
}

// ------------------------------------------------------------ settings

function fillVoices() {
  const sel = $('#s-voice');
  const keep = sel.value || state.s.voice;
  const opts = [new Option('Default', '')];
  for (const v of voices()) opts.push(new Option(`${v.name} (${v.lang})${v.localService ? '' : ', needs internet'}`, v.voiceURI));
  sel.replaceChildren(...opts);
  sel.value = keep;
}

function openSettings() {
  fillVoices();
  settings.toForm($('#settings-form'), state.s);
  $('#settings').showModal();
}

function saveSettings() {
  state.s = settings.fromForm($('#settings-form'));
  settings.save(state.s);
  settings.apply(state.s);
  applyAccess();
  $('#settings').close();
  notice('Settings saved.');
}

function unpair() {
  pairing.forget();
  $('#settings').close();
  newConversation();
  showView();
  notice('');
  $('#pair-msg').textContent = 'This tablet is no longer paired.';
}

// ------------------------------------------------------------ access

const scan = scanner(() => $('#settings').open || !$('#type-form').hidden || !$('#partner-form').hidden);
const dwell = dweller();
const access = {
  rescan: () => { if (scan.active()) scan.restart(); },
  scanning: () => scan.active(),
};

function applyAccess() {
  if (state.s.scan) scan.start(Math.round(state.s.scan_s * 1000));
  else scan.stop();
  dwell.set(state.s.dwell, Math.round(state.s.dwell_s * 1000));
}

// ------------------------------------------------------------ start

function secureContextNote() {
  if (window.isSecureContext) return;
  const b = $('#banner-insecure');
  b.hidden = false;
  b.textContent = `This page was opened over plain HTTP (${location.host}), so the browser turns off the microphone and offline use. `
    + 'Partner types still works. Ask the administrator to turn on HTTPS (REPLYD_TLS=auto), install replyd\'s certificate '
    + 'on this tablet from /tls/ca.pem, then open this page with https:// instead of http://.';
  $('#listen').disabled = true;
}

function init() {
  settings.apply(state.s);
  secureContextNote();
  $('#pair-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    redeem($('#pair-code').value);
  });
  $('#listen').addEventListener('click', listen);
  $('#cancel').addEventListener('click', () => {
    if (state.recording) {
      state.recording.cancel();
      state.recording = null;
      setListening(false);
      progress(null);
      notice('Cancelled.');
      return;
    }
    abortRequest('cancel');
    notice('Cancelled.');
  });
  $('#none-fit').addEventListener('click', noneFit);
  $('#type-open').addEventListener('click', () => openCompose('type'));
  $('#partner-open').addEventListener('click', () => openCompose('partner'));
  $('#type-close').addEventListener('click', closeCompose);
  $('#partner-close').addEventListener('click', closeCompose);
  $('#type-form').addEventListener('submit', typedReply);
  $('#partner-form').addEventListener('submit', partnerTyped);
  $('#new-conv').addEventListener('click', newConversation);
  $('#open-settings').addEventListener('click', openSettings);
  $('#s-save').addEventListener('click', (ev) => { ev.preventDefault(); saveSettings(); });
  $('#s-cancel').addEventListener('click', () => $('#settings').close());
  $('#s-unpair').addEventListener('click', unpair);
  $('#s-voice-test').addEventListener('click', () => speak('This is how I sound.', settings.fromForm($('#settings-form'))));
  $('#settings').addEventListener('close', () => { access.rescan(); });
  onVoicesChanged(fillVoices);
  // The latest turn stays in view when the tablet turns or the text grows.
  new ResizeObserver(() => { $('#log').scrollTop = $('#log').scrollHeight; }).observe($('#log'));
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && (!$('#type-form').hidden || !$('#partner-form').hidden)) closeCompose();
  });

  showView();
  pairFromLink();
  window.addEventListener('hashchange', pairFromLink);
  applyAccess();
  checkHealth();
  if ('serviceWorker' in navigator && window.isSecureContext) {
    navigator.serviceWorker.register('sw.js', { scope: './' }).catch(() => {});
  }
  document.documentElement.dataset.ready = 'true';
}

init();
