// The conversation page's choice of a voice (api/web/app/speech.js): each
// reply is spoken by a voice of its own language, and a reply in a language
// with no installed voice is not read by a voice of another. Runs in node
// with the browser's speechSynthesis replaced by a recorder.
import { strict as assert } from 'node:assert';

const spoken = [];
const installed = [
  { voiceURI: 'en-1', lang: 'en-US', localService: true },
  { voiceURI: 'de-1', lang: 'de-DE', localService: true },
  { voiceURI: 'ar-1', lang: 'ar-SA', localService: false },
];
globalThis.window = globalThis;
globalThis.speechSynthesis = {
  getVoices: () => installed,
  cancel() {},
  speak: (u) => spoken.push(u),
  addEventListener() {},
};
globalThis.SpeechSynthesisUtterance = class { constructor(text) { this.text = text; } };
globalThis.document = { documentElement: { lang: 'en' } };

const { speak } = await import('../../api/web/app/speech.js');
const s = { voice: 'en-1', rate: 1, volume: 1, reply_language: 'en' };
let n = 0;
const check = (name, fn) => { fn(); n++; console.log(`ok    ${name}`); };

check('the chosen voice speaks a reply of its own language', () => {
  assert.equal(speak('Hello', s, null, 'en'), true);
  assert.equal(spoken.at(-1).voice.voiceURI, 'en-1');
});
check('a German reply is spoken by a German voice, not the chosen English one', () => {
  assert.equal(speak('Guten Tag', s, null, 'de'), true);
  assert.equal(spoken.at(-1).voice.voiceURI, 'de-1');
  assert.equal(spoken.at(-1).lang, 'de-DE');
});
check('a region tag matches its language (ar-EG -> ar-SA)', () => {
  assert.equal(speak('مرحبا', s, null, 'ar-EG'), true);
  assert.equal(spoken.at(-1).voice.voiceURI, 'ar-1');
});
check('a reply in a language with no voice is not read by another: novoice', () => {
  const before = spoken.length;
  assert.equal(speak('Dzień dobry', s, null, 'pl'), 'novoice');
  assert.equal(spoken.length, before);
});
check('no language given: the user\'s language decides', () => {
  assert.equal(speak('Hallo', { ...s, reply_language: 'de' }, null), true);
  assert.equal(spoken.at(-1).voice.voiceURI, 'de-1');
});
check('an undetermined language (und) falls back to the user\'s language', () => {
  assert.equal(speak('Hi', s, null, 'und'), true);
  assert.equal(spoken.at(-1).voice.voiceURI, 'en-1');
});
console.log(`speech: ${n} passed, 0 failed`);
