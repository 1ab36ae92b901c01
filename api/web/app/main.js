// The replyd conversation page: the AAC user's screen. The partner's turn
// comes from a recording (Listen) or is typed; replyd suggests replies; the
// one the user picks is spoken and becomes the user's turn.
import { pair, pairing, unpairKey, infer, feedback, health, randomId, ReplydError, INFER_TIMEOUT_MS } from './client.js';
import { canRecord, startRecording } from './recorder.js';
import * as settings from './settings.js';
import { speak, voices, onVoicesChanged } from './speech.js';
import { scanner, dweller } from './access.js';
import { Board, wordsOf } from './spell.js';
import { T } from './strings.js';
import * as i18n from './i18n/i18n.js';
import { t as msg, errorText } from './i18n/i18n.js';
import { LiveSession, canStream, speakingMs } from './live.js';

const $ = (sel) => document.querySelector(sel);

const state = {
  s: settings.load(),
  history: [], // {role, content}
  dialogId: randomId(),
  step: 0,
  recording: null, // the recording in progress
  request: null, // {controller, id, timer} of the inference in flight
  answer: null, // {inferenceId, shownAt, candidates}: the replies shown
  // The turn the replies answer, from its first answer until the user
  // speaks: what a steered request repeats, and the user's actions.
  turn: null, // {parentId, base, startedAt, keys, selections, noneFit, first}
  steer: { timer: null, req: null }, // the Spell path's auto-fire and request
  reachable: true,
};

// The page's language first: the letter board and every string are drawn
// in it.
await i18n.load(state.s.ui_language || i18n.pick());

/** The Spell path asks again this long after the last key (SpeakFaster's
 * auto-fire for gaze typing). */
const AUTO_FIRE_MS = 600;

// ------------------------------------------------------------ conversation

/** Adds a turn to the conversation; returns its bubble and its entry in
 * the history (what withdrawTurn takes back). */
function addTurn(role, content) {
  const entry = { role, content };
  state.history.push(entry);
  const who = role === 'speaker' ? msg('app.partner') : (state.s.name || msg('app.you'));
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
  liveDialogChanged();
  return { li, entry };
}

/** Takes back a turn addTurn added (a partner's turn whose request was cut
 * before any reply). */
function withdrawTurn({ li, entry }) {
  const i = state.history.indexOf(entry);
  if (i >= 0) state.history.splice(i, 1);
  li.remove();
  $('#log-empty').hidden = state.history.length > 0;
  liveDialogChanged();
}

function notice(text) {
  $('#notice').textContent = text;
}

/** The button of reply text, rank (1 = first): a touch speaks it. */
function replyButton(text, rank) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'cand';
  const span = document.createElement('span');
  span.className = 'cand-text';
  span.textContent = text;
  b.append(span);
  b.dataset.rank = String(rank);
  b.setAttribute('data-scan', '');
  b.setAttribute('data-dwell', '');
  b.addEventListener('click', () => choose(text, rank));
  return b;
}

/** Shows list as the reply buttons, best first (drawn anew: a steered
 * answer, the board opening or closing); while the user spells, each
 * reply's words are chips that ask for other words. */
function showCandidates(list, inferenceId, language) {
  const ul = $('#cands');
  endSlots();
  ul.replaceChildren();
  const chips = spelling();
  list.forEach((text, i) => {
    const li = document.createElement('li');
    li.append(replyButton(text, i + 1));
    if (chips) {
      li.setAttribute('data-scan-group', '');
      li.append(wordChips(text, i));
    }
    ul.append(li);
  });
  $('#cands-wrap').hidden = list.length === 0;
  $('#none-fit').disabled = list.length === 0;
  if (list.length) state.answer = { inferenceId, shownAt: performance.now(), candidates: list, language };
  if (chips) access.refresh();
  else access.rescan();
}

/** The words of reply text (rank i+1) as chips: tapping one asks replyd
 * for other words in its place. */
function wordChips(text, i) {
  const div = document.createElement('div');
  div.className = 'words';
  div.setAttribute('role', 'group');
  div.setAttribute('aria-label', T.wordsOf(i + 1));
  wordsOf(text).forEach((w, k) => {
    const c = document.createElement('button');
    c.type = 'button';
    c.className = 'chip word-chip';
    c.textContent = w;
    c.dataset.word = String(k);
    c.setAttribute('data-scan', '');
    c.setAttribute('data-dwell', '');
    c.addEventListener('click', () => replaceWord(text, k, w));
    div.append(c);
  });
  return div;
}

function clearCandidates() {
  endSlots();
  $('#cands').replaceChildren();
  $('#cands-wrap').hidden = true;
  $('#none-fit').disabled = true;
  said('');
}

// ------------------------------------------------------------ reply slots

// A turn's replies as they arrive (issue 42). From the moment the answer is
// awaited, the list holds a quiet empty slot for each reply asked for
// (options.max_candidates); each reply fills its rank's slot in place as it
// comes (a candidate event, then the final answer), and nothing moves:
// - a shown reply never changes place: the slots have a fixed size (three
//   lines; a longer reply is drawn smaller, see app.css), and what sits
//   above the list (the progress line, the listening state) keeps its space
//   while the turn's replies are shown (hold: it turns invisible instead of
//   going away);
// - an empty slot is not a control: no focus, scanning or dwell lands on it;
//   a reply filling in re-draws nothing else, so a dwell in progress goes on
//   and the scanning highlight stays where it is; only the first reply takes
//   the focus (and the scanning highlight), as the whole answer did before;
// - a screen reader hears the first reply once (a polite live region), not
//   each one;
// - when fewer replies come than slots, the empty slots lose their outline
//   but keep their space until the turn's replies go, so that nothing after
//   them (the Spell button) moves either.
const slots = {
  on: false, // the slot layout is on screen
  open: false, // replies may still come
  base: null, // () => the payload steered requests repeat (at the first reply)
  heard: null, // the partner's turn an upload's transcript added, until its first reply
};

const emptySlot = () => {
  const li = document.createElement('li');
  li.className = 'slot';
  li.setAttribute('aria-hidden', 'true');
  return li;
};

/** Shows n empty slots: a turn's answer is awaited. base() gives, at its
 * first reply, the payload the turn's steered requests repeat. */
function openSlots(n, base) {
  const answered = live.answeredTurn; // awaiting an answer answers nothing
  endTurn();
  live.answeredTurn = answered;
  endSlots();
  const ul = $('#cands');
  ul.replaceChildren();
  for (let i = 0; i < n; i++) ul.append(emptySlot());
  ul.classList.add('slotted');
  slots.on = true;
  slots.open = true;
  slots.base = base;
  slots.heard = null;
  said('');
  $('#spell-open').hidden = true;
  $('#none-fit').disabled = true;
  $('#cands-wrap').hidden = false;
}

/** Shows reply text, rank (1 = first), in its slot. The first reply of a
 * turn starts the turn (what steered requests refine) and takes the focus. */
function fillSlot(rank, text, inferenceId, language) {
  if (!slots.open || !slots.on || typeof text !== 'string' || !text.trim() || !Number.isInteger(rank) || rank < 1) return;
  const ul = $('#cands');
  while (ul.children.length < rank) ul.append(emptySlot());
  const li = ul.children[rank - 1];
  const had = li.querySelector('.cand');
  if (had && had.textContent === text) return;
  const first = !state.answer;
  if (first) {
    // What changes above the list changes before the first reply is drawn
    // (scanning starts again once, at the reply, below).
    progress(null, true, false);
    setReachable(true);
  }
  li.className = '';
  li.removeAttribute('aria-hidden');
  const b = replyButton(text, rank);
  li.replaceChildren(b);
  const span = b.firstChild;
  if (span.scrollHeight > span.clientHeight + 1) span.classList.add('long');
  const shown = [...ul.querySelectorAll('.cand')].map((c) => c.textContent);
  if (first) {
    slots.heard = null; // the partner's turn stays
    state.answer = { inferenceId, shownAt: performance.now(), candidates: shown, language };
    state.turn = {
      parentId: inferenceId,
      base: slots.base ? slots.base() : null,
      startedAt: performance.now(),
      keys: 0,
      selections: 0,
      noneFit: false,
      first: shown,
    };
    $('#spell-open').hidden = !inferenceId;
    $('#none-fit').disabled = false;
    said(msg('app.firstReply', { text }));
    if (access.scanning()) {
      scanHere = b;
      access.rescan();
    } else {
      b.focus();
    }
  } else {
    state.answer.candidates = shown;
    if (state.turn) state.turn.first = shown;
  }
}

/** The turn's answer is complete: slots still empty lose their outline and
 * keep their place. With no reply at all the list goes, and so does the
 * partner's turn an upload's transcript added (the request was cut or
 * failed: as before the streamed replies, a turn without its answer is not
 * kept). */
function closeSlots() {
  if (!slots.open) return;
  slots.open = false;
  if (!state.answer) {
    if (slots.heard) withdrawTurn(slots.heard);
    slots.heard = null;
    clearCandidates();
    return;
  }
  for (const li of $('#cands').querySelectorAll('li.slot')) li.classList.add('gone');
}

/** Replies of the turn shown may come again (a newer turn proved to hold
 * no speech after closing the slots): the empty slots take their outline
 * back, in place. */
function reopenSlots() {
  if (!slots.on) {
    openSlots(state.s.count, () => payloadFor(false));
    return;
  }
  slots.open = true;
  for (const li of $('#cands').querySelectorAll('li.slot.gone')) li.classList.remove('gone');
}

/** The slot layout ends (the replies are drawn anew or go): what kept its
 * space above them goes. */
function endSlots() {
  slots.on = false;
  slots.open = false;
  $('#cands').classList.remove('slotted');
  for (const el of document.querySelectorAll('.held')) {
    el.classList.remove('held');
    el.hidden = true;
  }
}

/** Shows el, or hides it; while a turn's replies are on screen a hidden
 * element keeps its space (invisible), so that the replies stay put. */
function showEl(el, on) {
  if (on) {
    el.classList.remove('held');
    el.hidden = false;
  } else if (slots.on && !el.hidden) {
    el.classList.add('held');
  } else if (!el.classList.contains('held')) {
    el.hidden = true;
  }
}

/** What a screen reader says politely: the first reply of a turn. */
function said(text) {
  $('#cands-said').textContent = text;
}

/** The user answered the turn (spoke, typed, none fit, opened the Spell
 * board, or a new turn began): the replies still to come are not wanted,
 * and are not drawn. The upload in flight is let go, not cancelled: the
 * feedback on a reply shown early (or the steered request that refines
 * the turn) stops the rest at replyd, which answers with the replies it
 * sent (a cancelled request would be logged as one). A live turn's later
 * replies are ignored. */
function stopArriving() {
  if (slots.open && state.request) {
    state.request = null; // its answer, when it comes, is not the page's
    progress(null);
  }
  slots.open = false;
  live.answered = true;
  live.answeredTurn = Math.max(live.answeredTurn, live.shown || 0, live.turn || 0);
}

/** Reports the turn's outcome (POST /v1/feedback) for the answer shown
 * last, with the user's actions in the turn: keys_pressed (presses on the
 * letter board, including the one that opened it) and selections (reply
 * buttons and word chips, including the final pick). */
function report(fields, picked = false) {
  const a = state.answer;
  const t = state.turn;
  if (!a) return;
  const body = { inference_id: a.inferenceId, ...fields };
  body.time_to_choice_ms = Math.round(performance.now() - (t ? t.startedAt : a.shownAt));
  body.keys_pressed = t ? t.keys : 0;
  body.selections = (t ? t.selections : 0) + (picked ? 1 : 0);
  feedback(body);
}

/** The user picked candidate rank: speak it, add it, report it. */
function choose(text, rank) {
  say(text, state.answer && state.answer.language);
  report({ chosen_rank: rank }, true);
  endTurn();
  clearCandidates();
  notice('');
}

/** The turn is over (the user spoke, or a new turn began). */
function endTurn() {
  stopArriving();
  steerAbort();
  state.answer = null;
  state.turn = null;
  board.reset();
  closeSpell();
}

/** Speaks text as the user's turn and adds it to the conversation. */
function say(text, lang) {
  const spoken = liveSpeaking(text); // live listening pauses meanwhile
  const ok = speak(text, state.s, spoken, lang);
  if (ok === 'novoice') {
    spoken();
    notice(msg('app.noVoice', { language: languageName(lang || state.s.reply_language || i18n.current()) }));
  } else if (!ok) {
    spoken();
    notice(msg('app.cannotSpeak'));
  }
  addTurn('disabled_person', text);
}

/** The language the answer's replies are in (each candidate's language,
 * the same for all of one answer); undefined when the server did not say. */
function replyLanguage(res) {
  const c = Array.isArray(res.candidates) ? res.candidates.find((x) => x && typeof x.language === 'string') : null;
  return c ? c.language : undefined;
}

/** The name of language tag in the page's language (the tag itself when
 * the browser cannot name it). */
function languageName(tag) {
  try {
    return new Intl.DisplayNames([i18n.current()], { type: 'language' }).of(tag) || tag;
  } catch {
    return tag;
  }
}

/** None fit: reported at once (what the user then says replaces it, with
 * none_fit); the Spell board opens. */
function noneFit() {
  stopArriving();
  const a = state.answer;
  const t = state.turn;
  if (a && t && a.inferenceId === t.parentId) {
    t.noneFit = true;
    report({ none_fit: true });
  }
  clearCandidates();
  // Steering refines an answer with an inference_id; without one (an
  // older replyd) the user types.
  if (t && t.parentId) openSpell();
  else openCompose('type');
}

/** none_fit goes with a reply of the user's own when it is reported for
 * the answer that none fit. */
function ownReply(text) {
  const t = state.turn;
  const fields = { spoken_text: text };
  if (t && t.noneFit && state.answer && state.answer.inferenceId === t.parentId) fields.none_fit = true;
  report(fields);
}

function typedReply(ev) {
  ev.preventDefault();
  const text = $('#type-text').value.trim();
  if (!text) return;
  ownReply(text);
  endTurn();
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
  liveHold('spelling');
  form.querySelector('input').focus();
  access.rescan();
}

function closeCompose() {
  $('#type-form').hidden = true;
  $('#partner-form').hidden = true;
  if (!spelling()) liveRelease('spelling');
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
  endTurn();
  $('#log').replaceChildren();
  $('#log-empty').hidden = false;
  liveDialogChanged();
  clearCandidates();
  closeCompose();
  notice(msg('app.newConversationDone'));
}

// ------------------------------------------------------------ Spell path

const board = new Board($('#spell'), {
  press: spellPress,
  expand: () => steerNow(board.typed.steer()),
  speakTyped,
  close: closeSpell,
});

const spelling = () => !$('#spell').hidden;

/** Opens the letter board for the turn's replies (opening it is a key). */
function openSpell() {
  const t = state.turn;
  if (!t) return;
  stopArriving(); // the turn's first answer is what is shown
  t.keys += 1;
  board.setLayout(state.s.board);
  $('#spell').hidden = false;
  $('#spell-open').hidden = true;
  liveHold('spelling');
  notice('');
  document.body.classList.add('spelling');
  const a = state.answer;
  if (a && !$('#cands-wrap').hidden) showCandidates(a.candidates, a.inferenceId, a.language);
  board.draw();
  const first = $('#sp-keys button');
  if (first && !access.scanning()) first.focus({ preventScroll: true });
  access.rescan();
}

function closeSpell() {
  if (!spelling()) return;
  steerAbort();
  board.forgetInitial();
  $('#spell').hidden = true;
  document.body.classList.remove('spelling');
  liveRelease('spelling');
  $('#spell-open').hidden = !state.turn;
  const a = state.answer;
  if (a && !$('#cands-wrap').hidden) showCandidates(a.candidates, a.inferenceId, a.language);
  else access.rescan();
}

/** Every press on the board: counted, the request in flight dropped, and
 * the replies asked for again AUTO_FIRE_MS after the last press. With
 * nothing typed, the turn's first replies come back (unless none fit). */
function spellPress() {
  const t = state.turn;
  if (!t) return;
  t.keys += 1;
  steerAbort();
  const steer = board.typed.steer();
  if (!steer) {
    board.setStatus('');
    if (t.noneFit) clearCandidates();
    else showCandidates(t.first, t.parentId);
    return;
  }
  state.steer.timer = setTimeout(() => steerNow(steer), AUTO_FIRE_MS);
}

function steerAbort() {
  const sp = state.steer;
  clearTimeout(sp.timer);
  sp.timer = null;
  if (sp.req) {
    clearTimeout(sp.req.timer);
    sp.req.controller.abort('key');
    sp.req = null;
  }
  $('#cands').removeAttribute('aria-busy');
}

/** Asks replyd for the turn's replies under steer (words, prefix or
 * replace), as a refinement of the turn's first answer. */
async function steerNow(steer, looking = T.looking, noneText = null) {
  const t = state.turn;
  if (!t || !steer) return;
  steerAbort();
  const sp = state.steer;
  const controller = new AbortController();
  const r = { controller, timer: setTimeout(() => controller.abort('timeout'), INFER_TIMEOUT_MS) };
  sp.req = r;
  board.setStatus(looking);
  $('#cands').setAttribute('aria-busy', 'true');
  const payload = { ...t.base, steer, parent_inference_id: t.parentId };
  const done = () => {
    sp.req = null;
    clearTimeout(r.timer);
    $('#cands').removeAttribute('aria-busy');
  };
  try {
    const res = await infer({ payload, signal: controller.signal, requestId: randomId(8) });
    if (sp.req !== r) return;
    done();
    setReachable(true);
    const list = Array.isArray(res.response) ? res.response.filter((x) => typeof x === 'string' && x.trim()) : [];
    if (list.length) {
      showCandidates(list, res.inference_id, replyLanguage(res));
      board.setStatus(T.found(list.length));
      // The word chip the user tapped is gone with its reply: the focus
      // goes to the best alternative rather than to the page.
      if (document.activeElement === document.body && !access.scanning()) $('#cands .cand').focus();
    } else if (steer.replace) {
      board.setStatus(noneText); // the replies shown stay
    } else {
      clearCandidates();
      board.setStatus(steer.words ? T.noneWords : T.noneStart, Boolean(steer.words));
    }
  } catch (err) {
    if (sp.req !== r) return; // a key replaced it
    done();
    if (controller.signal.aborted) {
      board.setStatus(T.failed(T.tooSlow));
    } else if (err instanceof ReplydError && err.status === 429 && err.retryAfter) {
      board.setStatus(T.tooFast(err.retryAfter));
      sp.timer = setTimeout(() => steerNow(steer, looking, noneText), err.retryAfter * 1000);
    } else if (err instanceof ReplydError && (err.status === 401 || err.status === 0)) {
      showError(err);
      board.setStatus(T.failed(errorText(err)));
    } else {
      board.setStatus(T.failed(err instanceof ReplydError ? errorText(err) : msg('app.somethingWrong')));
    }
  }
}

/** A word chip: other words in place of word k of text. */
function replaceWord(text, k, w) {
  const t = state.turn;
  if (!t) return;
  t.selections += 1;
  steerNow({ replace: { text, word: k } }, T.lookingOther(w), T.noneReplace(w));
  // The next letter on the board asks for words of that initial instead.
  board.askInitial(w, (ch) => {
    t.keys += 1;
    steerNow({ replace: { text, word: k, initial: ch } }, T.lookingInitial(w, ch), T.noneReplace(w));
  });
}

/** "Speak as typed": the letters as they are become the reply. */
function speakTyped(text) {
  say(text);
  ownReply(text);
  endTurn();
  clearCandidates();
  notice('');
}

/** A hardware keyboard types on the board: letters, the apostrophe,
 * Backspace (Delete) and Escape (Close). */
function spellKey(ev) {
  if (!spelling() || ev.ctrlKey || ev.metaKey || ev.altKey || $('#settings').open) return;
  if (ev.target.closest && ev.target.closest('input, textarea, select')) return;
  let b = null;
  if (/^[\p{L}']$/u.test(ev.key)) b = $(`#sp-keys [data-key="${CSS.escape(ev.key.toLowerCase())}"]`);
  else if (ev.key === 'Backspace') b = $('#sp-del');
  else if (ev.key === 'Escape') b = $('#sp-close');
  if (!b || b.disabled) return;
  ev.preventDefault();
  b.click();
}

// ------------------------------------------------------------ recording

function setListening(on) {
  const b = $('#listen');
  b.setAttribute('aria-pressed', on ? 'true' : 'false');
  b.textContent = on ? msg('app.stop') : msg('app.listen');
}

/** Listen: listens to the partner (cancelling any request in flight), or
 * stops listening. Where the browser can stream (AudioWorklet) it streams
 * to replyd, which ends the turn when the partner stops (one turn, or the
 * whole conversation with the hands-free setting); else it records and
 * uploads. */
async function listen() {
  if (state.recording) {
    await finishRecording();
    return;
  }
  if (live.session) {
    stopLive();
    return;
  }
  if (canStream()) {
    startLive(!state.s.hands_free);
    return;
  }
  record();
}

/** Records the partner until the quiet test ends it, then uploads. */
async function record() {
  if (!canRecord()) {
    notice(window.isSecureContext ? msg('app.cannotRecord') : msg('app.micNeedsHttps'));
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
      ? msg('app.micBlocked')
      : msg('app.micFailed'));
    return;
  }
  setListening(true);
  progress(msg('app.listening'), true);
}

async function finishRecording(why) {
  const rec = state.recording;
  if (!rec) return;
  state.recording = null;
  setListening(false);
  const audio = await rec.stop();
  if (why === 'nothing' || !audio.heard) {
    progress(null);
    notice(msg('app.nothingHeard'));
    return;
  }
  suggest(audio);
}

// ------------------------------------------------------------ live listening

// Live listening (live.js): the microphone streamed to replyd, which finds
// the partner's turns. One press starts it and one stops it; with
// hands-free on it keeps listening across turns, else it stops after one.
// It pauses while the tablet speaks the chosen reply (until the browser
// says the speaking ended, or a timeout from the text's length) and while
// the user spells or types.
// turn: the newest turn the partner finished (its end_of_turn's turn
// number); heard: the newest turn that began (its speech_start); shown: the
// turn whose replies the slots hold; pending: the answer of a turn older
// than heard, drawn if the newer turn proves to hold no speech (quiet: the
// newest turn answered no_speech); answered: the user
// answered the current turn (its later replies are not shown), answeredTurn
// the newest turn they answered.
const live = { session: null, holds: new Set(), speakTimer: null, oneTurn: false, idleTimer: null, turn: undefined, heard: undefined, quiet: undefined, shown: undefined, pending: null, answered: false, answeredTurn: 0 };

// A one-turn Listen that hears no speech for this long stops, as a
// recording does.
const ONE_TURN_IDLE_MS = 15000;

function setLiveState(st, detail) {
  const on = Boolean(live.session);
  setListening(on);
  const el = $('#live-state');
  showEl(el, on);
  el.dataset.state = st;
  const paused = live.holds.has('speaking') ? T.livePausedSpeaking : T.livePausedSpelling;
  el.textContent = { listening: T.liveOn, paused, reconnecting: T.liveReconnecting }[st] || T.liveOff;
  if (st === 'error' && detail) notice(T.liveRefused(detail.message));
  if (st === 'stopped' && detail && detail.reason) notice(T.liveRefused(detail.reason));
}

/** Starts live listening: one turn, or continuous (hands-free). */
async function startLive(oneTurn) {
  if (state.recording) {
    state.recording.cancel();
    state.recording = null;
    setListening(false);
  }
  abortRequest('listen');
  clearCandidates();
  notice('');
  live.turn = undefined;
  live.heard = undefined;
  live.quiet = undefined;
  live.shown = undefined;
  live.pending = null;
  live.answeredTurn = 0;
  const session = new LiveSession({
    oneTurn,
    payload: () => payloadFor(false),
    onEvent: liveEvent,
    onState: (st, detail) => {
      if (live.session !== session) return;
      if (st === 'stopped' || st === 'error') {
        live.session = null;
        clearTimeout(live.idleTimer);
        showCaption('');
        if (oneTurn && st === 'error' && detail && detail.status === 403) {
          // This box does not listen live: the recording takes over.
          setLiveState('stopped');
          record();
          return;
        }
        if (oneTurn && st === 'stopped' && $('#progress-text').textContent === T.liveTranscribing) progress(null);
      }
      setLiveState(st, detail);
    },
  });
  live.session = session;
  live.oneTurn = oneTurn;
  clearTimeout(live.idleTimer);
  if (oneTurn) {
    live.idleTimer = setTimeout(() => {
      if (live.session !== session) return;
      stopLive();
      notice(msg('app.nothingHeard'));
    }, ONE_TURN_IDLE_MS);
  }
  setLiveState('reconnecting');
  try {
    await session.start();
  } catch (err) {
    live.session = null;
    session.stop();
    setLiveState('stopped');
    notice(err && err.name === 'NotAllowedError'
      ? 'The microphone is blocked: allow it for this page in the browser settings.'
      : 'The microphone could not be opened.');
  }
}

function stopLive() {
  const s = live.session;
  live.session = null;
  clearTimeout(live.speakTimer);
  clearTimeout(live.idleTimer);
  showCaption('');
  live.holds.clear();
  if (s) s.stop();
  setLiveState('stopped');
  progress(null);
}

/** Shows the partner's words so far (a caption event), or hides them. */
function showCaption(text) {
  const el = $('#caption');
  el.textContent = text || '';
  el.hidden = !text;
}

/** Whether the replies of live turn `turn` (a candidate event, or a
 * candidates event with replies) are drawn (client.md, the live protocol):
 * the page shows the newest turn that has replies, never an older one after
 * a newer one's first reply, nor a turn the user answered. A replyd without
 * turn numbers: as before, the current slots. */
function admitReplies(turn) {
  if (!Number.isInteger(turn)) return !live.answered;
  if (turn <= live.answeredTurn) return false;
  if (Number.isInteger(live.shown) && turn < live.shown) return false;
  if (turn !== live.shown) {
    // This turn's first reply: it replaces an older turn's replies.
    if (state.answer || !slots.open) openSlots(state.s.count, () => payloadFor(false));
    live.shown = turn;
    if (live.pending && live.pending.turn < turn) live.pending = null;
  } else if (!slots.open) {
    // A newer turn without speech closed this turn's slots meanwhile.
    reopenSlots();
  }
  return true;
}

/** Whether a live event belongs to a turn older than the newest one the
 * partner finished (its turn field; a replyd without turn numbers sends
 * none, and then every event is the current turn's). newer: an event of a
 * turn not finished yet counts as stale too (replies, transcripts). */
function staleTurn(data, newer) {
  if (!Number.isInteger(data.turn) || !Number.isInteger(live.turn)) return false;
  return newer ? data.turn !== live.turn : data.turn < live.turn;
}

function liveEvent(name, data) {
  switch (name) {
    case 'caption':
      if (typeof data.text === 'string') showCaption(data.text.trim());
      break;
    case 'speech_start':
      clearTimeout(live.idleTimer);
      if (Number.isInteger(data.turn)) live.heard = data.turn;
      if (state.answer) {
        // The user had not chosen: the partner's new turn replaces the replies.
        const answered = live.answeredTurn;
        endTurn();
        live.answeredTurn = answered;
        clearCandidates();
        notice(T.liveNextTurn);
      }
      progress(T.liveHearing, false);
      break;
    case 'end_of_turn':
      if (staleTurn(data, false)) break;
      if (Number.isInteger(data.turn)) live.turn = data.turn;
      // One turn: the microphone closes as soon as the partner stopped.
      if (live.oneTurn && live.session) live.session.closeMic();
      progress(T.liveTranscribing, false);
      // The turn's replies are awaited: their slots show.
      openSlots(state.s.count, () => payloadFor(false));
      live.answered = false;
      break;
    case 'transcript':
      if (staleTurn(data, true)) break;
      showCaption('');
      if (data.transcript && data.transcript.trim()) addTurn('speaker', data.transcript.trim());
      break;
    case 'candidate':
      // An older turn's replies once the partner began a newer one are not
      // drawn one by one (the newer turn cleared the screen): its whole
      // answer is kept instead, in case the newer turn holds no speech.
      if (olderThanHeard(data.turn) || !admitReplies(data.turn)) break;
      fillSlot(data.rank, data.text, data.inference_id, data.language);
      break;
    case 'candidates':
      if (olderThanHeard(data.turn) || staleTurn(data, false)) {
        // An older turn's answer, after the partner began a newer turn
        // (which supersedes it at replyd only once it proves to hold
        // speech): kept, and drawn if the newer turn is a breath or a
        // cough (no_speech), never the newer turn's progress.
        if (!data.no_speech && (!Number.isInteger(live.shown) || data.turn >= live.shown)) live.pending = data;
        if (live.pending && live.quiet === live.heard) drawPending();
        break;
      }
      progress(null);
      showCaption('');
      if (live.oneTurn && data.no_speech) notice(msg('app.nothingHeard'));
      if (data.no_speech && Number.isInteger(data.turn)) {
        live.quiet = data.turn;
        if (live.pending) {
          drawPending();
          break;
        }
      }
      liveAnswer(data);
      break;
    case 'error':
      if (staleTurn(data, false)) break;
      progress(null);
      showCaption('');
      closeSlots();
      if (data.error !== 'superseded') notice(data.message || '');
      if (live.oneTurn) stopLive();
      break;
    default:
  }
}

/** Whether live turn `turn` is older than the newest that began. */
function olderThanHeard(turn) {
  return Number.isInteger(turn) && Number.isInteger(live.heard) && turn < live.heard;
}

/** Draws the kept answer of an older turn: the newer turn held no speech,
 * so the older turn's replies are still the ones to answer. */
function drawPending() {
  const d = live.pending;
  live.pending = null;
  if (d) liveAnswer(d, true);
}

/** Shows a live turn's replies, as suggest does for an upload (those a
 * candidate event showed stay where they are); older: the answer of a turn
 * before the newest that ended. */
function liveAnswer(res, older) {
  const list = Array.isArray(res.response) ? res.response.filter((x) => typeof x === 'string' && x.trim()) : [];
  if (!older && (live.oneTurn || !state.s.hands_free)) stopLive();
  if (!list.length && Number.isInteger(res.turn) && Number.isInteger(live.shown) && res.turn !== live.shown) {
    // A turn without replies (a breath, a cough) leaves an older turn's
    // replies, shown or still coming, as they are.
    return;
  }
  if (list.length && !admitReplies(res.turn)) return;
  if (live.answered && !Number.isInteger(res.turn)) return; // the user answered before all the replies came
  if (!res.no_speech) {
    const language = replyLanguage(res);
    list.forEach((text, i) => fillSlot(i + 1, text, res.inference_id, language));
  }
  closeSlots();
}

/** Pauses live listening while the tablet speaks text; returns the function
 * that ends the pause (called when the speaking ends, or by a timeout). */
function liveSpeaking(text) {
  if (!live.session) return () => {};
  liveHold('speaking');
  let over = false;
  const end = () => {
    if (over) return;
    over = true;
    clearTimeout(live.speakTimer);
    liveRelease('speaking');
  };
  clearTimeout(live.speakTimer);
  live.speakTimer = setTimeout(end, speakingMs(text, state.s.rate));
  return end;
}

function liveHold(why) {
  if (!live.session) return;
  live.holds.add(why);
  live.session.pause();
  setLiveState('paused');
}

function liveRelease(why) {
  if (!live.session || !live.holds.delete(why) || live.holds.size) return;
  live.session.resume();
  setLiveState('listening');
}

/** The dialog changed: the next live turns are answered with it. */
function liveDialogChanged() {
  if (live.session) live.session.updatePayload();
}

// ------------------------------------------------------------ inference

/** Shows text as what the page is doing (null: nothing), with Cancel
 * when cancellable. rescan: scanning starts again when Cancel came or went
 * (not, say, when a turn's last reply came while the highlight is on an
 * earlier one). */
function progress(text, cancellable = true, rescan = true) {
  const el = $('#progress');
  const cancel = $('#cancel');
  const could = !cancel.disabled && !cancel.hidden && !el.hidden;
  showEl(el, Boolean(text));
  // Kept invisible above a turn's replies, it keeps its last text and
  // buttons, so that its height stays.
  if (text || !el.classList.contains('held')) {
    $('#progress-text').textContent = text || '';
    cancel.hidden = !cancellable;
  }
  // Invisible, Cancel takes no highlight or dwell.
  cancel.disabled = !text;
  if (rescan && could !== (!cancel.disabled && !cancel.hidden && !el.hidden)) access.rescan();
}

/** Cancels the request in flight; the replies it already showed stay. */
function abortRequest(reason) {
  const r = state.request;
  if (!r) return;
  state.request = null;
  clearTimeout(r.timer);
  r.controller.abort(reason);
  progress(null);
  closeSlots();
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
  // The user's language: replies come in it (the page's language unless
  // the user chose another).
  p.reply_language = s.reply_language || i18n.current();
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
  endTurn();
  const controller = new AbortController();
  const payload = payloadFor(Boolean(audio));
  const id = randomId(8);
  notice('');
  // The turn: steered requests repeat its messages (the transcript in
  // place of the recording), dialog_id and step_id.
  openSlots(state.s.count, () => ({ ...payload, messages: state.history.map((m) => ({ role: m.role, content: m.content })) }));
  const r = { controller, id, timer: setTimeout(() => controller.abort('timeout'), INFER_TIMEOUT_MS) };
  state.request = r;
  progress(audio ? msg('app.sending') : msg('app.suggesting'));
  const current = () => state.request === r;
  // The partner's words become their turn as soon as they are known, so
  // that the slots move (if at all) before any reply is drawn in them.
  let heard = !audio;
  const hear = (t) => {
    if (heard) return;
    heard = true;
    slots.heard = addTurn('speaker', t);
  };
  try {
    const res = await infer({
      payload,
      audio,
      signal: controller.signal,
      requestId: id,
      onTranscript: (t, ev) => {
        if (!current() || !audio) return;
        const words = (t || '').trim();
        if (!words || (ev && ev.no_speech)) return;
        progress(msg('app.heardSuggesting', { text: words }));
        hear(words);
      },
      onCandidate: (c) => {
        if (current() && heard) fillSlot(c.rank, c.text, c.inference_id, c.language);
      },
    });
    if (!current()) return;
    state.request = null;
    clearTimeout(r.timer);
    progress(null);
    if (audio) {
      const t = (res.transcript || '').trim();
      if (res.no_speech || !t) {
        clearCandidates();
        notice(msg('app.notCaught'));
        return;
      }
      hear(t);
    }
    const list = Array.isArray(res.response) ? res.response.filter((x) => typeof x === 'string' && x.trim()) : [];
    if (!list.length && !state.answer) {
      slots.heard = null; // answered, without replies: the partner's turn stays
      clearCandidates();
      notice(msg('app.noReplies'));
      return;
    }
    const language = replyLanguage(res);
    list.forEach((text, i) => fillSlot(i + 1, text, res.inference_id, language));
    closeSlots();
  } catch (err) {
    if (!current()) return; // replaced or cancelled on purpose
    state.request = null;
    clearTimeout(r.timer);
    progress(null);
    closeSlots();
    if (controller.signal.aborted) {
      notice(controller.signal.reason === 'timeout' ? msg('app.tooSlow') : msg('app.cancelled'));
      return;
    }
    showError(err);
  }
}

function showError(err) {
  if (!(err instanceof ReplydError)) {
    notice(msg('app.somethingWrong'));
    return;
  }
  if (err.status === 0) {
    setReachable(false);
    notice(msg('app.unreachableRetry'));
  } else if (err.status === 401) {
    pairing.forget();
    showView();
    $('#pair-error').textContent = `${errorText(err)} ${msg('app.pairAgain')}`;
  } else {
    notice(errorText(err));
  }
}

// ------------------------------------------------------------ reachability

function setReachable(ok, text) {
  state.reachable = ok;
  const b = $('#banner-offline');
  b.hidden = ok && !text;
  b.textContent = text || (ok ? '' : msg('app.unreachableBanner'));
}

async function checkHealth() {
  try {
    const h = await health();
    if (h.status === 'loading') setReachable(true, msg('app.loadingBanner'));
    else if (h.status === 'error') setReachable(true, msg('app.modelErrorBanner'));
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
  $('#pair-msg').textContent = msg('app.pairing');
  btn.disabled = true;
  try {
    const r = await pair(code);
    $('#pair-code').value = '';
    $('#pair-msg').textContent = '';
    showView();
    notice(r.clientId ? msg('app.pairedAs', { client: r.clientId }) : msg('app.paired'));
    $('#listen').focus();
  } catch (err) {
    $('#pair-msg').textContent = '';
    let why = errorText(err);
    if (err.status === 0) why = msg('app.unreachablePair');
    else if (err.status === 401) why = msg('app.pairCodeWrong');
    $('#pair-error').textContent = why;
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

/** The letter board setting: the layouts of the language's letters. */
function fillBoardSetting() {
  $('#s-board-label').textContent = T.layoutLabel;
  $('#s-board').replaceChildren(new Option(T.layoutQwerty, 'qwerty'), new Option(T.layoutAbc, 'abc'));
}

/** The three language settings: the page's, the user's and the partner's. */
function fillLanguageSettings() {
  const opts = (first) => [new Option(first, ''), ...i18n.LANGS.map((code) => {
    const o = new Option(i18n.NAMES[code], code);
    o.lang = code;
    return o;
  })];
  $('#s-ui').replaceChildren(...opts(msg('app.langTablet')));
  $('#s-reply').replaceChildren(...opts(msg('app.langSameAsPage')));
  $('#s-language').replaceChildren(...opts(msg('app.langAuto')));
}

function fillVoices() {
  const sel = $('#s-voice');
  const keep = sel.value || state.s.voice;
  const opts = [new Option(msg('app.voiceDefault'), '')];
  for (const v of voices()) opts.push(new Option(v.localService ? `${v.name} (${v.lang})` : msg('app.voiceOnline', { name: v.name, lang: v.lang }), v.voiceURI));
  sel.replaceChildren(...opts);
  sel.value = keep;
}

function openSettings() {
  fillVoices();
  settings.toForm($('#settings-form'), state.s);
  $('#settings').showModal();
}

function saveSettings() {
  const before = state.s.ui_language;
  state.s = settings.fromForm($('#settings-form'));
  if (state.s.ui_language !== before) {
    // The page's language changed: the page starts again in it (the
    // conversation is not kept, as after a reload).
    settings.save(state.s);
    location.reload();
    return;
  }
  settings.save(state.s);
  settings.apply(state.s);
  applyAccess();
  board.setLayout(state.s.board);
  $('#settings').close();
  notice(msg('app.settingsSaved'));
}

/** Unpair: the tablet gives its key up, so that a copy of it left behind
 * no longer works; the tablet forgets it even when replyd cannot be asked,
 * and then says the key must be revoked on the admin page. */
async function unpair() {
  $('#settings').close();
  newConversation();
  const revoked = await unpairKey();
  pairing.forget();
  showView();
  notice('');
  $('#pair-msg').textContent = msg(revoked ? 'app.unpaired' : 'app.unpairedKeyKept');
}

// ------------------------------------------------------------ access

// While the user spells, scanning keeps to the conversation view (the
// replies and the board) and starts again at the letter rows after a press.
// A turn's first reply is where scanning goes when it shows (scanHere, once).
let scanHere = null;
const scan = scanner(() => $('#settings').open || !$('#type-form').hidden || !$('#partner-form').hidden, {
  root: () => (spelling() ? $('#view-talk') : document.body),
  home: () => {
    if (spelling()) return $('#sp-keys');
    const h = scanHere;
    scanHere = null;
    return h && h.isConnected ? h : null;
  },
});
const dwell = dweller();
const access = {
  rescan: () => { if (scan.active()) scan.restart(); },
  // Replies that come while the user scans the board: the highlight stays.
  refresh: () => { if (scan.active()) scan.refresh(); },
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
  b.textContent = msg('app.insecure', { host: location.host });
  $('#listen').disabled = true;
}

function init() {
  i18n.translate();
  // The first reply of a turn, said once by a screen reader (said()).
  const sr = document.createElement('p');
  sr.id = 'cands-said';
  sr.className = 'sr-only';
  sr.setAttribute('aria-live', 'polite');
  $('#cands-wrap').before(sr);
  settings.apply(state.s);
  secureContextNote();
  $('#pair-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    redeem($('#pair-code').value);
  });
  $('#listen').addEventListener('click', listen);
  $('#s-hands-free-label').textContent = T.handsFree;
  $('#cancel').addEventListener('click', () => {
    if (state.recording) {
      state.recording.cancel();
      state.recording = null;
      setListening(false);
      progress(null);
      notice(msg('app.cancelled'));
      return;
    }
    abortRequest('cancel');
    notice(msg('app.cancelled'));
  });
  $('#none-fit').addEventListener('click', noneFit);
  $('#spell-open').textContent = T.spellOpen;
  $('#spell-open').addEventListener('click', openSpell);
  document.addEventListener('keydown', spellKey);
  fillBoardSetting();
  fillLanguageSettings();
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
  $('#s-voice-test').addEventListener('click', () => speak(msg('app.voiceSample'), settings.fromForm($('#settings-form'))));
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
