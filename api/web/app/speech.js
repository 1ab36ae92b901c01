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

/**
 * Speaks text with the settings' voice, rate and volume, cutting off
 * anything still being spoken. Resolves when queued; false when the browser
 * cannot speak. onEnd, when given, is called when the speaking ends (some
 * browsers never say so: callers keep a timeout too).
 */
export function speak(text, s, onEnd) {
  if (!('speechSynthesis' in window) || typeof SpeechSynthesisUtterance === 'undefined') return false;
  const u = new SpeechSynthesisUtterance(text);
  if (onEnd) {
    u.onend = onEnd;
    u.onerror = onEnd;
  }
  const v = voices().find((x) => x.voiceURI === s.voice);
  if (v) {
    u.voice = v;
    u.lang = v.lang;
  } else {
    // The user's language: the one chosen, else the page's.
    u.lang = s.reply_language || document.documentElement.lang || s.language;
  }
  u.rate = s.rate;
  u.volume = s.volume;
  speechSynthesis.cancel();
  speechSynthesis.speak(u);
  return true;
}
