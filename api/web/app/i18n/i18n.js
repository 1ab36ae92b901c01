// The message catalogs' lookup, shared by the conversation page (./i18n/)
// and the admin page (../app/i18n/): one JSON catalog per language in this
// folder (README.md), English under every other as the fallback for a
// missing key. t(key, values) returns the string of key with {name}
// placeholders filled (numbers in the language's digits and separators);
// a plural entry ({"one": ..., "other": ...}) is chosen by values.n with
// Intl.PluralRules.

/** The shipped languages, in the order a language menu lists them. */
export const LANGS = Object.freeze(['en', 'de', 'fr', 'es', 'it', 'nl', 'pt', 'pl', 'sv', 'uk', 'ar']);

/** Each language's own name, for menus (the same in every catalog). */
export const NAMES = Object.freeze({
  en: 'English', de: 'Deutsch', fr: 'Français', es: 'Español', it: 'Italiano', nl: 'Nederlands',
  pt: 'Português', pl: 'Polski', sv: 'Svenska', uk: 'Українська', ar: 'العربية',
});

let en = {};
let cat = {};
let lang = 'en';
let plural = new Intl.PluralRules('en');
let number = new Intl.NumberFormat('en');

/** The shipped language that best fits a list of BCP 47 tags (the
 * browser's navigator.languages by default): the first whose primary
 * subtag is shipped; English when none is. */
export function pick(tags = navigator.languages || [navigator.language]) {
  for (const tag of tags || []) {
    const primary = String(tag || '').toLowerCase().split(/[-_]/)[0];
    if (LANGS.includes(primary)) return primary;
  }
  return 'en';
}

async function fetchCatalog(base, code) {
  const res = await fetch(new URL(`${code}.json`, base), { cache: 'no-cache' });
  if (!res.ok) throw new Error(`catalog ${code}: ${res.status}`);
  return res.json();
}

/**
 * Loads the catalog of code (a shipped language; anything else is
 * English) and English beside it, from the folder base (a URL ending in
 * "/"), and sets the document's lang and dir. A catalog that cannot be
 * loaded leaves English. Resolves to the language in use.
 */
export async function load(code, base = new URL('./', import.meta.url)) {
  const want = LANGS.includes(code) ? code : 'en';
  try {
    en = await fetchCatalog(base, 'en');
  } catch {
    en = {};
  }
  cat = en;
  lang = 'en';
  if (want !== 'en') {
    try {
      cat = await fetchCatalog(base, want);
      lang = want;
    } catch {
      cat = en;
    }
  }
  plural = new Intl.PluralRules(lang);
  number = new Intl.NumberFormat(lang);
  const root = document.documentElement;
  root.lang = lang;
  root.dir = dir();
  return lang;
}

/** The language in use. */
export const current = () => lang;

/** The writing direction of the language in use: "ltr" or "rtl". */
export const dir = () => ((cat._meta && cat._meta.dir) === 'rtl' ? 'rtl' : 'ltr');

/** Whether the catalog in use (not the English fallback) has key. */
export const has = (key) => Object.hasOwn(cat, key);

function fill(s, values) {
  return s.replace(/\{(\w+)\}/g, (m, k) => {
    if (!values || !(k in values)) return m;
    const v = values[k];
    return typeof v === 'number' ? number.format(v) : String(v);
  });
}

/** The string of key in the language in use (English where it has none;
 * the key itself where English has none either), with values filled. */
export function t(key, values) {
  let s = Object.hasOwn(cat, key) ? cat[key] : en[key];
  if (s === undefined) return key;
  if (s && typeof s === 'object') {
    const n = values && typeof values.n === 'number' ? values.n : 0;
    s = s[plural.select(n)] ?? s.other ?? '';
  }
  return fill(String(s), values);
}

/**
 * The string of key as nodes, where a value that is a DOM node (an element
 * the page keeps, such as a <span id=...>) stands in its placeholder's
 * place, so that each language puts it where its word order wants it.
 */
export function nodes(key, values) {
  const marks = {};
  const plainValues = {};
  for (const [k, v] of Object.entries(values || {})) {
    if (v instanceof Node) {
      marks[k] = v;
      plainValues[k] = `\u0000${k}\u0000`;
    } else {
      plainValues[k] = v;
    }
  }
  return t(key, plainValues).split('\u0000').map((part, i) => (i % 2 === 1 && marks[part] ? marks[part] : document.createTextNode(part)));
}

/**
 * Puts text into el, where **word** in it is bold (a <strong>): the
 * catalogs carry no HTML.
 */
export function rich(el, text) {
  el.replaceChildren(...text.split('**').map((part, i) => {
    if (i % 2 === 0) return document.createTextNode(part);
    const b = document.createElement('strong');
    b.textContent = part;
    return b;
  }));
}

const ATTRS = ['aria-label', 'title', 'placeholder', 'alt'];

/**
 * Translates the static page under root: an element's data-i18n names the
 * key of its text (data-i18n-rich: its text with **bold**), and
 * data-i18n-aria-label, -title, -placeholder and -alt the keys of those
 * attributes.
 */
export function translate(root = document) {
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll('[data-i18n-rich]')) rich(el, t(el.dataset.i18nRich));
  for (const a of ATTRS) {
    for (const el of root.querySelectorAll(`[data-i18n-${a}]`)) el.setAttribute(a, t(el.getAttribute(`data-i18n-${a}`)));
  }
}

/**
 * The message for an API error: the catalog's "error.<code>" for its
 * code (the API's English message is never shown), with the retry delay
 * when the answer gave one.
 */
export function errorText(err) {
  if (!err) return '';
  const code = err.code || '';
  let msg = has(`error.${code}`) || Object.hasOwn(en, `error.${code}`) ? t(`error.${code}`) : '';
  if (!msg) msg = err.code ? t('error.other', { code }) : t('error.unknown');
  if (err.retryAfter) msg = `${msg} ${t('error.retryIn', { n: err.retryAfter })}`;
  return msg;
}
