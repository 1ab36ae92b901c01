// The tablet's settings, kept in localStorage: the page's language
// (ui_language; "" follows the tablet), who the user is (name, biography,
// persona, reply_language: the user's language, "" the page's; language:
// the partner's, "" detected; user_id, remember), how many suggestions,
// the voice, and the screen and access options (board: the Spell path's
// letter layout, qwerty or abc).

const STORE = 'replyd.app.settings';

export const defaults = Object.freeze({
  ui_language: '',
  reply_language: '',
  name: '',
  biography: '',
  persona: '',
  language: '',
  user_id: '',
  remember: false,
  count: 4,
  voice: '',
  rate: 1,
  volume: 1,
  size: 'm',
  theme: '',
  scan: false,
  scan_s: 1.5,
  dwell: false,
  dwell_s: 1,
  format: '',
  board: 'qwerty',
  hands_free: false,
});

/** The saved settings over the defaults. */
export function load() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem(STORE) || '{}') || {}; } catch { saved = {}; }
  const s = { ...defaults };
  for (const k of Object.keys(defaults)) {
    if (saved[k] !== undefined && typeof saved[k] === typeof defaults[k]) s[k] = saved[k];
  }
  return s;
}

export function save(s) {
  localStorage.setItem(STORE, JSON.stringify(s));
}

/** Applies the theme and text size to the page. */
export function apply(s) {
  const root = document.documentElement;
  if (s.theme) root.dataset.theme = s.theme;
  else delete root.dataset.theme;
  root.dataset.size = s.size || 'm';
}

const clamp = (v, lo, hi, def) => (Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def);

/** Fills the settings form from s. */
export function toForm(form, s) {
  const el = form.elements;
  for (const k of ['ui_language', 'reply_language', 'name', 'biography', 'persona', 'language', 'user_id', 'size', 'theme', 'format', 'board']) el[k].value = s[k];
  el.count.value = String(s.count);
  el.rate.value = String(s.rate);
  el.volume.value = String(s.volume);
  el.scan_s.value = String(s.scan_s);
  el.dwell_s.value = String(s.dwell_s);
  el.remember.checked = s.remember;
  el.scan.checked = s.scan;
  el.dwell.checked = s.dwell;
  if (el.hands_free) el.hands_free.checked = s.hands_free;
  el.voice.value = s.voice;
}

/** Reads the settings form into a settings object. */
export function fromForm(form) {
  const el = form.elements;
  const s = { ...defaults };
  for (const k of ['ui_language', 'reply_language', 'name', 'biography', 'persona', 'language', 'user_id', 'size', 'theme', 'format', 'voice', 'board']) s[k] = el[k].value.trim();
  if (s.board !== 'abc') s.board = 'qwerty';
  s.count = clamp(Number(el.count.value), 1, 8, defaults.count);
  s.rate = clamp(Number(el.rate.value), 0.5, 2, 1);
  s.volume = clamp(Number(el.volume.value), 0, 1, 1);
  s.scan_s = clamp(Number(el.scan_s.value), 0.5, 10, defaults.scan_s);
  s.dwell_s = clamp(Number(el.dwell_s.value), 0.3, 5, defaults.dwell_s);
  s.remember = el.remember.checked;
  s.scan = el.scan.checked;
  s.dwell = el.dwell.checked;
  s.hands_free = Boolean(el.hands_free && el.hands_free.checked);
  return s;
}
