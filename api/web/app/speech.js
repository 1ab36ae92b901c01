// Speaking the user's reply with the browser's speechSynthesis, preferring
// voices that work offline (localService).

/** The voices that can be chosen, offline ones first. */
export function voices() {
  if (!('speechSynthesis' in window)) return [];
  const all = speechSynthesis.getVoices();
  return [...all.filter((v) => v.localService), ...all.filter((v) => !v.localService)];
}

/** Calls fn whenever the list of voices changes (it loads late in Chrome). */
export function onVoicesChanged(fn) {
  if ('speechSynthesis' in window) speechSynthesis.addEventListener('voiceschanged', fn);
}

/** The primary subtag of a language tag ("de" of "de-AT"), lower case. */
const base = (tag) => String(tag || '').toLowerCase().split(/[-_]/)[0];

/**
 * Speaks text with the settings' voice, rate and volume, cutting off
 * anything still being spoken, in language lang (a reply's own language;
 * default: the user's language, else the page's). The chosen voice is used
 * when it speaks that language; else a voice of that language. Returns
 * true when queued, false when the browser cannot speak, and 'novoice'
 * when the browser lists voices but none of lang: the text is then not
 * read with a wrong one. onEnd, when given, is called when the speaking
 * ends (some browsers never say so: callers keep a timeout too).
 */
export function speak(text, s, onEnd, lang) {
  if (!('speechSynthesis' in window) || typeof SpeechSynthesisUtterance === 'undefined') return false;
  const want = lang && lang !== 'und' ? lang : (s.reply_language || document.documentElement.lang || s.language);
  const all = voices();
  const chosen = all.find((x) => x.voiceURI === s.voice);
  let v = chosen && (!want || base(chosen.lang) === base(want)) ? chosen : null;
  if (!v && want) v = all.find((x) => base(x.lang) === base(want)) || null;
  if (!v && all.length > 0 && want) return 'novoice';
  const u = new SpeechSynthesisUtterance(text);
  if (onEnd) {
    u.onend = onEnd;
    u.onerror = onEnd;
  }
  if (v) {
    u.voice = v;
    u.lang = v.lang;
  } else if (want) {
    u.lang = want;
  }
  u.rate = s.rate;
  u.volume = s.volume;
  speechSynthesis.cancel();
  speechSynthesis.speak(u);
  return true;
}
