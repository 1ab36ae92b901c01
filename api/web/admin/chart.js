// A small SVG bar chart drawn to the width of its container.
import { h, fmtShort, fmtHourMinute, getLocale } from './util.js';
import { t } from '../app/i18n/i18n.js';

const HEIGHT = 180;
const PAD = { top: 12, right: 8, bottom: 26, left: 40 };
// An upper bound of a 12px axis label's width per character, and the least
// gap between two labels: labels that would come closer are left out, so
// they never run together on a phone.
const CHAR_W = 7;
const GAP = 10;

function niceMax(v) {
  if (v <= 4) return 4;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/**
 * Draws points ({t: Date, v: number}, or {name: string, v: number} for
 * categories) as bars into figure, replacing any earlier chart, with label
 * (e.g. "Requests per hour") as its accessible name and a summary in words.
 * opts.max fixes the top of the scale (100 for percentages) and opts.unit
 * follows each value ("%").
 */
export function barChart(figure, points, label, opts = {}) {
  figure.querySelector('svg')?.remove();
  const width = Math.max(260, Math.floor(figure.clientWidth || 600));
  const plotW = width - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const max = opts.max || niceMax(Math.max(0, ...points.map((p) => p.v)));
  const unit = opts.unit || '';
  const name = (p) => (p.name !== undefined ? p.name : fmtShort(p.t));
  const y = (v) => PAD.top + plotH - (v / max) * plotH;
  const total = points.reduce((s, p) => s + p.v, 0);
  const peak = points.reduce((b, p) => (p.v > (b ? b.v : -1) ? p : b), null);

  const num = new Intl.NumberFormat(getLocale(), { maximumFractionDigits: 1 });
  const val = (v) => (unit === '%' ? new Intl.NumberFormat(getLocale(), { style: 'percent', maximumFractionDigits: 1 }).format(v / 100) : num.format(v));
  const summary = !points.length ? t('admin.chartNoData', { label })
    : unit ? t('admin.chartValues', { label, values: points.map((p) => `${name(p)} ${val(p.v)}`).join(', ') })
      : t('admin.chartSummary', { label, n: points.length, total, peak: peak.v, at: name(peak) });
  // The chart keeps time running left to right in every language.
  const svg = h('svg', { viewBox: `0 0 ${width} ${HEIGHT}`, width, height: HEIGHT, role: 'img', 'aria-label': summary, dir: 'ltr' });

  for (const v of [0, max / 2, max]) {
    svg.append(
      h('line', { svg: true, class: 'grid', x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v) }),
      h('text', { svg: true, class: 'tick', x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', text: val(Math.round(v * 10) / 10) }),
    );
  }
  const n = points.length;
  const slot = n ? plotW / n : plotW;
  const barW = Math.max(1, slot * 0.78);
  points.forEach((p, i) => {
    const x = PAD.left + i * slot + (slot - barW) / 2;
    const top = y(p.v);
    svg.append(h('rect', { svg: true, class: 'bar', x, y: top, width: barW, height: Math.max(0, PAD.top + plotH - top) },
      h('title', { svg: true, text: `${name(p)}: ${val(p.v)}` })));
  });
  if (n) {
    // Labels go only where they do not touch one already placed, so they
    // never run together on a phone: each category in order, or for times
    // the first, the last and then the middle (the clock alone within a day).
    const categories = points[0].name !== undefined && n <= 8;
    const timeFmt = n > 1 && points[0].t && points[n - 1].t - points[0].t < 20 * 3600e3 ? fmtHourMinute : fmtShort;
    const text = (p) => (p.name !== undefined ? p.name : timeFmt(p.t));
    const placed = [];
    const label = (i, anchor) => {
      const s = text(points[i]);
      const w = s.length * CHAR_W;
      const x = anchor === 'start' ? PAD.left : anchor === 'end' ? width - PAD.right : PAD.left + i * slot + slot / 2;
      const x0 = anchor === 'start' ? x : anchor === 'end' ? x - w : x - w / 2;
      if (x0 < 0 || x0 + w > width || placed.some(([l, r]) => x0 < r + GAP && l < x0 + w + GAP)) return;
      placed.push([x0, x0 + w]);
      svg.append(h('text', { svg: true, class: 'tick x', x, y: HEIGHT - 8, 'text-anchor': anchor, text: s }));
    };
    if (categories) {
      points.forEach((_, i) => label(i, 'middle'));
    } else {
      label(0, 'start');
      if (n > 1) label(n - 1, 'end');
      if (n > 2) label(Math.floor((n - 1) / 2), 'middle');
    }
  } else {
    svg.append(h('text', { svg: true, class: 'tick', x: width / 2, y: HEIGHT / 2, 'text-anchor': 'middle', text: t('admin.noData') }));
  }
  figure.append(svg);
}
