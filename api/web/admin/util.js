// Small DOM and formatting helpers shared by the views. No dependencies.

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

/** Shows err's message in el (a role=alert paragraph), or clears it. */
export function showError(el, err) {
  el.textContent = err ? err.message || String(err) : '';
}

/** Parses an ISO date; null for missing or Go's zero time. */
export function parseTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1971) return null;
  return d;
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const shortTime = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });

/** Formats an ISO timestamp for a table cell; "" for none. */
export function fmtTime(iso) {
  const d = parseTime(iso);
  return d ? dateTime.format(d) : '';
}

/** Formats a date for a chart axis. */
export const fmtShort = (d) => shortTime.format(d);

/** Formats the current time as a clock reading. */
export const fmtClock = (d = new Date()) => clock.format(d);

/** A <time> element for an ISO timestamp. */
export function timeEl(iso) {
  const d = parseTime(iso);
  return d ? h('time', { datetime: d.toISOString(), text: dateTime.format(d) }) : '';
}

/** Formats a byte count: 1.5 MB. */
export function fmtBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  const units = ['bytes', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} bytes` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

/** Formats seconds as "2 d 3 h", "4 h 5 min", "6 min 7 s". */
export function fmtDuration(sec) {
  if (typeof sec !== 'number' || !Number.isFinite(sec)) return '–';
  sec = Math.floor(sec);
  const d = Math.floor(sec / 86400), hh = Math.floor((sec % 86400) / 3600);
  const m = Math.floor((sec % 3600) / 60), s = sec % 60;
  if (d) return `${d} d ${hh} h`;
  if (hh) return `${hh} h ${m} min`;
  if (m) return `${m} min ${s} s`;
  return `${s} s`;
}

/** Integer with thousands separators. */
export const fmtInt = (n) => (typeof n === 'number' ? n.toLocaleString() : '–');

/** Formats an acceptance rate (0..1, or null when there is none) as a percentage. */
export const fmtRate = (rate) => (typeof rate === 'number' ? `${Math.round(rate * 1000) / 10}%` : '–');

/** Shortens a long hash for display. */
export const shortHash = (s) => (s && s.length > 14 ? `${s.slice(0, 12)}…` : s || '');
