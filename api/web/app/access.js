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
 */
export function scanner(paused) {
  let timer = null;
  let idx = -1;
  let interval = 1500;
  let current = null;

  const items = () => [...document.querySelectorAll('[data-scan]')].filter(visible);
  const mark = (el) => {
    if (current) current.classList.remove('scanned');
    current = el;
    if (el) {
      el.classList.add('scanned');
      el.focus({ preventScroll: false });
    }
  };
  const tick = () => {
    if (paused()) return;
    const list = items();
    if (!list.length) return mark(null);
    idx = (idx + 1) % list.length;
    mark(list[idx]);
  };
  const select = (ev) => {
    if (!timer || paused() || !current) return;
    ev.preventDefault();
    ev.stopPropagation();
    const el = current;
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
  function restart() {
    idx = -1;
    if (timer) {
      clearInterval(timer);
      timer = setInterval(tick, interval);
    }
    // The first control after a short pause, so the UI can change first.
    setTimeout(() => { if (timer) tick(); }, 50);
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
      mark(null);
      document.documentElement.classList.remove('scan-on');
      document.removeEventListener('keydown', onKey, true);
      document.removeEventListener('pointerdown', onPointer, true);
      document.removeEventListener('click', onClick, true);
    },
    restart,
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
