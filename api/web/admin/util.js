// Small DOM and formatting helpers shared by the views: dates, numbers and
// durations in the page's language (Intl).
import { ApiError } from './api.js';
import { errorText } from '../app/i18n/i18n.js';

/** Returns the first element matching sel under root. */
export const $ = (sel, root = document) => root.querySelector(sel);

/**
 * Creates an element. attrs: "class", "text" (textContent), "on<event>"
 * (listener), true (empty attribute), null/false (skipped), anything else
 * (attribute). Children may be nodes, strings or nested arrays.
 */
export function h(tag, attrs = {}, ...children) {
  const ns = tag === 'svg' || attrs.svg ? 'http://www.w3.org/2000/svg' : null;
  const el = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false || k === 'svg') continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Shows err in el (a role=alert paragraph), or clears it: an API error
 * by its code, in the page's language; a plain Error (the page's own,
 * already translated) by its message. */
export function showError(el, err) {
  if (!err) el.textContent = '';
  else if (err instanceof ApiError) el.textContent = errorText(err);
  else el.textContent = err.message || String(err);
}

/** Parses an ISO date; null for missing or Go's zero time. */
export function parseTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1971) return null;
  return d;
}

// The formatters follow the page's language (setLocale, after the catalog
// is loaded).
let locale = 'en';
let dateTime;
let shortTime;
let clock;
let integer;
let percent;

/** Sets the language dates, numbers and durations are written in. */
export function setLocale(lang) {
  locale = lang;
  dateTime = new Intl.DateTimeFormat(lang, { dateStyle: 'medium', timeStyle: 'medium' });
  shortTime = new Intl.DateTimeFormat(lang, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  clock = new Intl.DateTimeFormat(lang, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  integer = new Intl.NumberFormat(lang);
  percent = new Intl.NumberFormat(lang, { style: 'percent', maximumFractionDigits: 1 });
}
setLocale('en');

/** The language the formatters write in. */
export const getLocale = () => locale;

/** Formats an ISO timestamp for a table cell; "" for none. */
export function fmtTime(iso) {
  const d = parseTime(iso);
  return d ? dateTime.format(d) : '';
}

/** Formats a date for a chart axis. */
export const fmtShort = (d) => shortTime.format(d);

/** Formats a time of day (hours and minutes) for a chart axis. */
export const fmtHourMinute = (d) => new Intl.DateTimeFormat(locale, { hour: '2-digit', minute: '2-digit' }).format(d);

/** Formats the current time as a clock reading. */
export const fmtClock = (d = new Date()) => clock.format(d);

/** A <time> element for an ISO timestamp. */
export function timeEl(iso) {
  const d = parseTime(iso);
  return d ? h('time', { datetime: d.toISOString(), text: dateTime.format(d) }) : '';
}

const unit = (u, n, digits = 0) => new Intl.NumberFormat(locale, {
  style: 'unit', unit: u, unitDisplay: 'short', maximumFractionDigits: digits,
}).format(n);

/** Formats a byte count: 1.5 MB. */
export function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  const units = ['byte', 'kilobyte', 'megabyte', 'gigabyte', 'terabyte'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return unit(units[i], n, i === 0 || n >= 10 ? 0 : 1);
}

/** Formats seconds as "2 d 3 h", "4 h 5 min", "6 min 7 s" in the page's
 * language (the two largest units). */
export function fmtDuration(sec) {
  if (typeof sec !== 'number' || !Number.isFinite(sec)) return '–';
  sec = Math.floor(sec);
  const d = Math.floor(sec / 86400), hh = Math.floor((sec % 86400) / 3600);
  const m = Math.floor((sec % 3600) / 60), s = sec % 60;
  const two = (a, ua, b, ub) => `${unit(ua, a)} ${unit(ub, b)}`;
  if (d) return two(d, 'day', hh, 'hour');
  if (hh) return two(hh, 'hour', m, 'minute');
  if (m) return two(m, 'minute', s, 'second');
  return unit('second', s);
}

/** Formats seconds with one decimal: 1.5 s. */
export const fmtSeconds = (sec) => unit('second', sec, 1);

/** Formats milliseconds: 850 ms. */
export const fmtMs = (ms) => unit('millisecond', ms);

/** Integer with the language's thousands separators. */
export const fmtInt = (n) => (typeof n === 'number' ? integer.format(n) : '–');

/** Formats an acceptance rate (0..1, or null when there is none) as a percentage. */
export const fmtRate = (rate) => (typeof rate === 'number' ? percent.format(rate) : '–');

/** Shortens a long hash for display. */
export const shortHash = (s) => (s && s.length > 14 ? `${s.slice(0, 12)}…` : s || '');
