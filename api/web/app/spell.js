// The Spell path's letter board: what the user typed (initials, spelled
// words or the reply's start) and the board that types it. The board knows
// nothing of replyd: main.js asks for replies with steer() and counts the
// presses it reports.
import { T } from './strings.js';
import { rowsFor, keyCap } from './letters.js';
import { current } from './i18n/i18n.js';

/** The words of a reply as the steer contract counts them: runs of
 * letters, combining marks and digits, joined by inner apostrophes or
 * hyphens ("I'm", "well-known"); punctuation between them is no word. */
export function wordsOf(text) {
  return text.match(/[\p{L}\p{M}\p{Nd}]+(?:['’‐-][\p{L}\p{M}\p{Nd}]+)*/gu) || [];
}

/** The most words and characters the steer payload takes. */
const MAX_WORDS = 16;
const MAX_ENTRY = 32;
const MAX_PREFIX = 200;

/**
 * What the user typed. mode "words": entries, one per word of the reply
 * (one letter = an initial, more = the word's start); open is the entry the
 * letters go to while the user spells a word (-1: each letter is a new
 * initial). mode "prefix": text, the reply's beginning. Each mode keeps its
 * own text, so switching back and forth loses nothing.
 */
export class Typed {
  constructor() {
    this.mode = 'words';
    this.entries = [];
    this.open = -1;
    this.text = '';
  }

  empty() {
    return this.mode === 'words' ? this.entries.length === 0 : this.text.trim() === '';
  }

  /** Types one character (a letter or an apostrophe). False when full. */
  letter(ch) {
    const c = ch.toLowerCase();
    if (this.mode === 'prefix') {
      if (this.text.length >= MAX_PREFIX) return false;
      this.text += c;
      return true;
    }
    if (this.open >= 0) {
      if (this.entries[this.open].length >= MAX_ENTRY) return false;
      this.entries[this.open] += c;
      return true;
    }
    if (this.entries.length >= MAX_WORDS || c === "'") return false;
    this.entries.push(c);
    return true;
  }

  /** Space: in prefix mode a space; in words mode it ends the word being
   * spelled. */
  space() {
    if (this.mode === 'prefix') {
      if (!this.text || this.text.endsWith(' ') || this.text.length >= MAX_PREFIX) return false;
      this.text += ' ';
      return true;
    }
    if (this.open < 0) return false;
    this.open = -1;
    return true;
  }

  /** Deletes the last character (of the word being spelled, or the last
   * initial). */
  del() {
    if (this.mode === 'prefix') {
      if (!this.text) return false;
      this.text = this.text.slice(0, -1);
      return true;
    }
    if (this.open >= 0) {
      const e = this.entries[this.open].slice(0, -1);
      if (e) {
        this.entries[this.open] = e;
      } else {
        this.entries.splice(this.open, 1);
        this.open = -1;
      }
      return true;
    }
    if (!this.entries.length) return false;
    this.entries.pop();
    return true;
  }

  clear() {
    if (this.empty() && this.open < 0) return false;
    if (this.mode === 'prefix') this.text = '';
    else {
      this.entries = [];
      this.open = -1;
    }
    return true;
  }

  setMode(m) {
    if (m === this.mode) return false;
    this.mode = m;
    return true;
  }

  /** Spelling word i: the next letters go to it; i again ends spelling. */
  spell(i) {
    if (this.mode !== 'words' || i < 0 || i >= this.entries.length) return false;
    this.open = this.open === i ? -1 : i;
    return true;
  }

  /** The prefix as sent: no leading spaces, the first letter a capital
   * (the start of a sentence). */
  prefix() {
    const t = this.text.replace(/^\s+/, '');
    return t ? t[0].toUpperCase() + t.slice(1) : '';
  }

  /** The steer object of the contract, or null when nothing is typed. */
  steer() {
    if (this.empty()) return null;
    if (this.mode === 'prefix') return { prefix: this.prefix() };
    return { words: [...this.entries] };
  }

  /** What "speak as typed" says. */
  spoken() {
    if (this.mode === 'prefix') return this.prefix().trim();
    return this.entries.join(' ').trim();
  }
}

const el = (tag, props = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v === true) e.setAttribute(k, '');
    else if (v !== false && v != null) e.setAttribute(k, v);
  }
  e.append(...kids);
  return e;
};

const button = (props, text) => el('button', { type: 'button', 'data-scan': true, 'data-dwell': true, ...props, text });

/**
 * The board inside host (a <section>). on: handlers the board calls:
 * press() after every press that changed what is typed (and before the
 * handler's own action), expand(), speakTyped(text), close(), spellWord().
 * Its status line says what the page is doing; setStatus sets it.
 */
export class Board {
  constructor(host, on) {
    this.host = host;
    this.on = on;
    this.typed = new Typed();
    this.layout = 'qwerty';
    this.build();
  }

  build() {
    const h = this.host;
    h.replaceChildren();
    this.modeWords = button({ id: 'sp-mode-words', class: 'key wide mode', 'aria-pressed': 'true', onclick: () => this.mode('words') }, T.modeWords);
    this.modeStart = button({ id: 'sp-mode-start', class: 'key wide mode', 'aria-pressed': 'false', onclick: () => this.mode('prefix') }, T.modeStart);
    this.chips = el('div', { id: 'sp-typed', class: 'typed', role: 'group', 'aria-label': T.typedGroup, 'aria-describedby': 'sp-hint', 'data-scan-group': true });
    this.hint = el('p', { id: 'sp-hint', class: 'hint' });
    this.statusText = el('span', { id: 'sp-status-text' });
    this.spellWordBtn = button({ id: 'sp-spell-word', class: 'offer', hidden: true, onclick: () => this.spellWord() }, T.spellWord);
    this.status = el('p', { id: 'sp-status', class: 'sp-status', role: 'status' }, this.statusText);
    this.keys = el('div', { id: 'sp-keys', class: 'keys', role: 'group', 'aria-label': T.keysGroup });
    this.spaceBtn = button({ id: 'sp-space', class: 'key wide', onclick: () => this.act(() => this.typed.space()) }, T.space);
    const edit = el('div', { id: 'sp-edit', class: 'keyrow ctl', role: 'group', 'aria-label': T.editGroup, 'data-scan-group': true },
      button({ id: 'sp-del', class: 'key wide', onclick: () => this.act(() => this.typed.del()) }, T.del),
      this.spaceBtn,
      button({ id: 'sp-clear', class: 'key wide', onclick: () => this.act(() => this.typed.clear()) }, T.clear),
      this.modeWords, this.modeStart);
    this.expandBtn = button({ id: 'sp-expand', class: 'key wide primary', onclick: () => this.expand() }, T.expand);
    this.speakBtn = button({ id: 'sp-speak', class: 'key wide', onclick: () => this.speakTyped() }, T.speakTyped);
    const acts = el('div', { id: 'sp-acts', class: 'keyrow ctl', role: 'group', 'aria-label': T.actGroup, 'data-scan-group': true },
      this.expandBtn, this.speakBtn,
      button({ id: 'sp-close', class: 'key wide', onclick: () => this.on.close() }, T.close));
    h.append(
      el('h2', { id: 'spell-h', class: 'sr-only', text: T.spellHeading }),
      this.chips,
      this.hint,
      el('div', { class: 'sp-status-row' }, this.status, this.spellWordBtn),
      this.keys, edit, acts,
    );
    this.drawKeys();
    this.draw();
  }

  /** Draws the letter rows of layout (qwerty: the language's keyboard,
   * or abc) in the page's language (letters.js). */
  setLayout(layout) {
    const l = layout === 'abc' ? 'abc' : 'qwerty';
    if (l === this.layout && this.keys.childElementCount) return;
    this.layout = l;
    this.drawKeys();
  }

  drawKeys() {
    const lang = current();
    const letters = rowsFor(lang, this.layout);
    const rows = letters.map((row, r) => el('div', {
      class: 'keyrow letters', role: 'group', 'aria-label': T.rowGroup(r + 1), 'data-scan-group': true, 'data-row': String(r + 1),
    }, ...[...row].map((ch) => button({
      class: 'key letter',
      'data-key': ch,
      'aria-label': ch === "'" ? T.apostrophe : keyCap(ch, lang),
      onclick: () => this.letter(ch),
    }, ch === "'" ? '’' : keyCap(ch, lang)))));
    this.keys.replaceChildren(...rows);
    this.keys.dataset.layout = this.layout;
    // As many columns as the longest row has keys.
    this.keys.style.setProperty('--cols', String(Math.max(...letters.map((row) => [...row].length))));
  }

  /** A letter key: the initial asked for by askInitial, or a letter typed. */
  letter(ch) {
    const pick = this.initialPick;
    if (pick && ch !== "'") {
      this.initialPick = null;
      this.draw();
      pick.fn(ch);
      return;
    }
    this.act(() => this.typed.letter(ch));
  }

  /** After a word chip (word of a reply): the next letter key chooses the
   * replacement word's initial and calls fn(letter) instead of typing; any
   * other press on the board forgets it. */
  askInitial(word, fn) {
    this.initialPick = { word, fn };
    this.draw();
  }

  /** Forgets an initial asked for (the board closes). */
  forgetInitial() {
    if (!this.initialPick) return;
    this.initialPick = null;
    this.draw();
  }

  /** Runs a change of what is typed; a press that changed it is reported. */
  act(change) {
    this.initialPick = null;
    if (change()) this.on.press();
    this.offer(false);
    this.draw();
    // A control that the change disabled (Clear, Delete) gives the focus
    // to the first key, not to the page.
    const f = document.activeElement;
    if (f && f.disabled && this.host.contains(f)) this.keys.querySelector('button').focus();
  }

  mode(m) {
    this.act(() => this.typed.setMode(m));
  }

  spellWord() {
    const t = this.typed;
    // The last word typed as an initial: spelling it is the likeliest help.
    let i = t.entries.length - 1;
    for (let j = t.entries.length - 1; j >= 0; j--) {
      if (t.entries[j].length === 1) {
        i = j;
        break;
      }
    }
    if (i >= 0 && t.open !== i) t.spell(i);
    this.on.press();
    this.offer(false);
    this.draw();
    const first = this.keys.querySelector('button');
    if (first) first.focus();
  }

  expand() {
    this.initialPick = null;
    this.on.press();
    this.offer(false);
    this.on.expand();
  }

  speakTyped() {
    const text = this.typed.spoken();
    if (!text) return;
    this.on.press();
    this.on.speakTyped(text);
  }

  /** Shows or hides the "spell a word" offer (after no reply came). */
  offer(on) {
    this.spellWordBtn.hidden = !on || this.typed.mode !== 'words' || this.typed.entries.length === 0;
  }

  setStatus(text, offerSpelling = false) {
    this.statusText.textContent = text;
    this.offer(offerSpelling);
  }

  reset() {
    this.initialPick = null;
    this.typed = new Typed();
    this.setStatus('');
    this.draw();
  }

  /** Redraws what is typed and the controls that depend on it. */
  draw() {
    const t = this.typed;
    const words = t.mode === 'words';
    this.modeWords.setAttribute('aria-pressed', String(words));
    this.modeStart.setAttribute('aria-pressed', String(!words));
    this.host.dataset.mode = t.mode;
    this.spaceBtn.textContent = words ? T.nextWord : T.space;
    this.spaceBtn.disabled = words ? t.open < 0 : !t.text || t.text.endsWith(' ');
    this.expandBtn.disabled = t.empty();
    this.speakBtn.disabled = !t.spoken();
    this.host.querySelector('#sp-del').disabled = words ? !t.entries.length : !t.text;
    this.host.querySelector('#sp-clear').disabled = t.empty();
    const f = document.activeElement;
    const focused = f && this.chips.contains(f) ? f.dataset.entry : undefined;
    const kids = [];
    if (t.empty()) {
      kids.push(el('span', { class: 'typed-empty', text: words ? T.typedEmptyWords : T.typedEmptyStart }));
    } else if (words) {
      t.entries.forEach((entry, i) => {
        kids.push(button({
          class: `chip letter-chip${i === t.open ? ' open' : ''}`,
          'data-entry': String(i),
          'aria-pressed': String(i === t.open),
          'aria-label': T.chipWord(i, entry),
          onclick: () => this.act(() => t.spell(i)),
        }, entry));
      });
    } else {
      kids.push(el('span', { class: 'typed-text', id: 'sp-prefix', text: t.prefix() }), el('span', { class: 'caret', 'aria-hidden': 'true' }));
    }
    this.chips.replaceChildren(...kids);
    if (focused !== undefined) {
      const again = this.chips.querySelector(`[data-entry="${focused}"]`);
      if (again) again.focus();
    }
    this.host.toggleAttribute('data-initial', Boolean(this.initialPick));
    if (this.initialPick) this.hint.textContent = T.pickInitial(this.initialPick.word);
    else this.hint.textContent = words && t.open >= 0 ? T.spellingWord(t.open, t.entries[t.open]) : words && t.entries.length ? T.chipHint : '';
  }
}
