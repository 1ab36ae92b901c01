// The conversation page's strings for the Spell path, by name. Each reads
// the message catalog (i18n/<lang>.json, key "spell.<name>") when it is
// used, so the page's language is the one loaded at start. To add a
// string: add its key to i18n/en.json (and the other catalogs; the test
// in api/web names any key a catalog lacks) and a line here.
import { t } from './i18n/i18n.js';

const s = (name) => t(`spell.${name}`);

export const T = Object.freeze({
  get spellOpen() { return s('open'); },
  get spellHeading() { return s('heading'); },
  get modeGroup() { return s('modeGroup'); },
  get modeWords() { return s('modeWords'); },
  get modeStart() { return s('modeStart'); },
  get typedGroup() { return s('typedGroup'); },
  get typedEmptyWords() { return s('typedEmptyWords'); },
  get typedEmptyStart() { return s('typedEmptyStart'); },
  get keysGroup() { return s('keysGroup'); },
  rowGroup: (n) => t('spell.rowGroup', { n }),
  get editGroup() { return s('editGroup'); },
  get actGroup() { return s('actGroup'); },
  get del() { return s('del'); },
  get clear() { return s('clear'); },
  get space() { return s('space'); },
  get nextWord() { return s('nextWord'); },
  get expand() { return s('expand'); },
  get speakTyped() { return s('speakTyped'); },
  get close() { return s('close'); },
  get apostrophe() { return s('apostrophe'); },
  chipWord: (i, entry) => t('spell.chipWord', { n: i + 1, entry }),
  get chipHint() { return s('chipHint'); },
  spellingWord: (i, entry) => t('spell.spellingWord', { n: i + 1, entry }),
  get looking() { return s('looking'); },
  lookingOther: (w) => t('spell.lookingOther', { word: w }),
  found: (n) => t('spell.found', { n }),
  get noneWords() { return s('noneWords'); },
  get noneStart() { return s('noneStart'); },
  noneReplace: (w) => t('spell.noneReplace', { word: w }),
  pickInitial: (w) => t('spell.pickInitial', { word: w }),
  lookingInitial: (w, ch) => t('spell.lookingInitial', { word: w, letter: ch.toUpperCase() }),
  get spellWord() { return s('spellWord'); },
  wordsOf: (n) => t('spell.wordsOf', { n }),
  tooFast: (n) => t('spell.tooFast', { n }),
  failed: (why) => t('spell.failed', { why }),
  get tooSlow() { return s('tooSlow'); },
  get layoutLabel() { return s('layoutLabel'); },
  get layoutQwerty() { return s('layoutQwerty'); },
  get layoutAbc() { return s('layoutAbc'); },
  // Live listening (live.js).
  get liveOpen() { return t('live.open'); },
  get liveStop() { return t('live.stop'); },
  get liveOn() { return t('live.on'); },
  get livePausedSpeaking() { return t('live.pausedSpeaking'); },
  get livePausedSpelling() { return t('live.pausedSpelling'); },
  get liveReconnecting() { return t('live.reconnecting'); },
  get liveOff() { return t('live.off'); },
  get liveHearing() { return t('live.hearing'); },
  get liveTranscribing() { return t('live.transcribing'); },
  get liveNextTurn() { return t('live.nextTurn'); },
  liveRefused: (why) => t('live.refused', { why }),
  get liveCannot() { return t('live.cannot'); },
  get handsFree() { return t('live.handsFree'); },
});
