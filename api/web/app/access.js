// Access for people who cannot touch precisely: single-switch scanning and
// dwell selection. Both act on the page's [data-scan] / [data-dwell]
// controls and end in the control's own click, so every path (touch,
// keyboard, switch, dwell) runs the same code.

const visible = (el) => !el.disabled && !el.closest('[hidden]') && el.getClientRects().length > 0;

/**
 * Switch scanning: every interval ms the highlight (and the focus) moves to
 * the next control; the switch (Space, Enter, or a pointer press anywhere)
 * selects the highlighted one. paused() tells when not to scan (a dialog
 * or a text field is open).
 *
 * Row-column scanning: a [data-scan-group] element (a row of letter keys,
 * a reply with its word chips) is one step; selecting it steps through its
 * own controls, and after two rounds with no selection the highlight leaves
 * it. A group with one control is that control. opts.root() is the element
 * whose controls are scanned (the whole page by default); opts.home(), when
 * it returns an element, is where the highlight starts again after a
 * selection (the letter rows while the user spells) instead of the first
 * control.
 */
export function scanner(paused, opts = {}) {
  const root = opts.root || (() => document.body);
  const home = opts.home || (() => null);
  let timer = null;
  let idx = -1;
  let interval = 1500;
  let current = null;
  let group = null; // the group being scanned; null: the top level
  let rounds = 0;
  let leaving = null; // the group just left, where the top level goes on
  let toHome = false;

  const isGroup = (el) => el.hasAttribute('data-scan-group');
  // The nearest group around el below `within` (null: none).
  const groupOf = (el, within) => {
    const g = el.parentElement && el.parentElement.closest('[data-scan-group]');
    return g && within.contains(g) && g !== within ? g : null;
  };
  const controls = (g) => [...g.querySelectorAll('[data-scan]')].filter(visible);
  // The steps at one level: controls and groups with no group between
  // them and the level; a group with one control is that control.
  const items = () => {
    const within = group || root();
    if (!within) return [];
    const out = [];
    for (const el of within.querySelectorAll('[data-scan], [data-scan-group]')) {
      if (groupOf(el, within)) continue;
      if (!isGroup(el)) {
        if (visible(el)) out.push(el);
        continue;
      }
      if (el.closest('[hidden]') || el.getClientRects().length === 0) continue;
      const inner = controls(el);
      if (inner.length === 1) out.push(inner[0]);
      else if (inner.length > 1) out.push(el);
    }
    return out;
  };
  const mark = (el) => {
    if (current) current.classList.remove('scanned');
    current = el;
    if (!el) return;
    el.classList.add('scanned');
    if (isGroup(el)) {
      // A group cannot take the focus: the page scrolls it into view.
      if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
      el.scrollIntoView({ block: 'nearest' });
    } else {
      el.focus({ preventScroll: false });
    }
  };
  const tick = () => {
    if (paused()) return;
    if (group && !group.isConnected) group = null;
    let list = items();
    if (group && !list.length) {
      group = null;
      list = items();
    }
    if (!list.length) return mark(null);
    if (toHome) {
      toHome = false;
      const h = home();
      const at = h ? list.findIndex((el) => el === h || h.contains(el)) : -1;
      idx = at >= 0 ? at - 1 : -1;
    }
    if (leaving) {
      const at = list.indexOf(leaving);
      leaving = null;
      if (at >= 0) idx = at;
    }
    idx += 1;
    if (idx >= list.length) {
      idx = 0;
      if (group && ++rounds >= 2) {
        leaving = group;
        group = null;
        return tick();
      }
    }
    mark(list[idx]);
  };
  const select = (ev) => {
    if (!timer || paused() || !current) return;
    ev.preventDefault();
    ev.stopPropagation();
    const el = current;
    if (isGroup(el)) {
      group = el;
      rounds = 0;
      idx = -1;
      mark(null);
      reset();
      return;
    }
    group = null;
    toHome = true;
    restart();
    el.click();
  };
  const onKey = (ev) => {
    if ((ev.key === ' ' || ev.key === 'Enter') && !ev.repeat) select(ev);
  };
  const onPointer = (ev) => {
    if (ev.button === 0) select(ev);
  };
  const onClick = (ev) => {
    // The press selected already; swallow the click it would make.
    if (timer && !paused() && ev.isTrusted) {
      ev.preventDefault();
      ev.stopPropagation();
    }
  };
  // The timer starts a new step; the first comes after a short pause, so
  // the UI can change first.
  function reset() {
    if (timer) {
      clearInterval(timer);
      timer = setInterval(tick, interval);
    }
    setTimeout(() => { if (timer) tick(); }, 50);
  }
  /** Starts again at the top level (at home, when there is one). */
  function restart() {
    idx = -1;
    group = null;
    leaving = null;
    toHome = true;
    reset();
  }
  return {
    start(ms) {
      interval = ms;
      if (timer) clearInterval(timer);
      document.documentElement.classList.add('scan-on');
      document.addEventListener('keydown', onKey, true);
      document.addEventListener('pointerdown', onPointer, true);
      document.addEventListener('click', onClick, true);
      timer = setInterval(tick, interval);
      restart();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
      group = null;
      mark(null);
      document.documentElement.classList.remove('scan-on');
      document.removeEventListener('keydown', onKey, true);
      document.removeEventListener('pointerdown', onPointer, true);
      document.removeEventListener('click', onClick, true);
    },
    restart,
    /** After the page changed: starts again only when the highlighted
     * control is gone. */
    refresh() {
      if (timer && current && (!current.isConnected || !(isGroup(current) ? current.getClientRects().length : visible(current)))) restart();
    },
    active: () => timer !== null,
  };
}

/**
 * Dwell selection: resting the pointer on a [data-dwell] control for ms
 * selects it; a ring shows the time filling. The pointer must leave a
 * control before it can dwell-select it again.
 */
export function dweller() {
  let ms = 1000;
  let on = false;
  let target = null;
  let timer = null;
  let spent = null; // the control just selected, until the pointer leaves it

  const clear = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (target) target.classList.remove('dwelling');
    target = null;
  };
  const onOver = (ev) => {
    if (!on || ev.pointerType === 'touch') return;
    const el = ev.target.closest && ev.target.closest('[data-dwell]');
    if (el === target) return;
    clear();
    if (!el || el === spent || !visible(el)) return;
    target = el;
    el.style.setProperty('--dwell-ms', `${ms}ms`);
    el.classList.add('dwelling');
    timer = setTimeout(() => {
      const done = target;
      clear();
      spent = done;
      if (done && visible(done)) done.click();
    }, ms);
  };
  const onOut = (ev) => {
    const el = ev.target.closest && ev.target.closest('[data-dwell]');
    if (!el || (ev.relatedTarget && el.contains(ev.relatedTarget))) return;
    if (el === spent) spent = null;
    if (el === target) clear();
  };
  document.addEventListener('pointerover', onOver);
  document.addEventListener('pointerout', onOut);
  return {
    set(enabled, dwellMs) {
      on = enabled;
      ms = dwellMs;
      if (!on) clear();
    },
  };
}
