// Package window counts events per key in fixed windows: a window opens
// with a key's first event after its previous window closed and lasts
// Length. The rate limits of one box, the failed-authentication throttle,
// the wrong login codes per address and the one-a-window logging of
// refusals all count this way, with this one type.
package window

import "time"

// Counter holds one open window per key, each carrying a count and the
// caller's data of type T (nothing: struct{}). It is not safe for
// concurrent use: callers hold their own lock, which usually guards more
// than the counter. The zero value is not usable: set Length.
type Counter[T any] struct {
	// Length is how long a window lasts.
	Length time.Duration

	open    map[string]*Window[T]
	pruneAt time.Time
}

// Window is one key's open window.
type Window[T any] struct {
	Start time.Time // the first event's time
	N     int       // events counted in it
	Data  T
}

// New returns a Counter of windows of length d.
func New[T any](d time.Duration) *Counter[T] {
	return &Counter[T]{Length: d}
}

// Over reports whether a window of length d that opened at start is over
// at now. A time slightly before start (another box's clock, a clock stepped
// back less than a window) still counts in the window; one more than a
// window before it opens a new one.
func Over(d time.Duration, start, now time.Time) bool {
	return !now.Before(start.Add(d)) || now.Before(start.Add(-d))
}

// Over reports whether a window that opened at start is over at now.
func (c *Counter[T]) Over(start, now time.Time) bool { return Over(c.Length, start, now) }

// Current returns key's window open at now, or nil.
func (c *Counter[T]) Current(key string, now time.Time) *Window[T] {
	w := c.open[key]
	if w == nil || c.Over(w.Start, now) {
		return nil
	}
	return w
}

// Add counts one event of key at now, opening a new window when none is
// open, and returns the window. The caller may change its Data.
func (c *Counter[T]) Add(key string, now time.Time) *Window[T] {
	w := c.get(key, now)
	w.N++
	return w
}

// Allow counts one event of key at now when fewer than limit were counted
// in its window, and reports whether it did; when not, it returns the time
// until the window closes. A limit of 0 or less allows everything and
// counts nothing.
func (c *Counter[T]) Allow(key string, limit int, now time.Time) (bool, time.Duration) {
	if limit <= 0 {
		return true, 0
	}
	w := c.get(key, now)
	if w.N >= limit {
		return false, c.Left(w, now)
	}
	w.N++
	return true, 0
}

// Refund takes back one event counted in key's window open at now; it does
// nothing when none is open or none was counted.
func (c *Counter[T]) Refund(key string, now time.Time) {
	if w := c.Current(key, now); w != nil && w.N > 0 {
		w.N--
	}
}

// Left is the time from now until w closes.
func (c *Counter[T]) Left(w *Window[T], now time.Time) time.Duration {
	return w.Start.Add(c.Length).Sub(now)
}

// Len is the number of windows held, closed ones not yet removed included.
func (c *Counter[T]) Len() int { return len(c.open) }

// Close removes the windows over at now (every window when all is set),
// calling fn, when not nil, with each one's key before it goes.
func (c *Counter[T]) Close(now time.Time, all bool, fn func(key string, w *Window[T])) {
	for k, w := range c.open {
		if all || c.Over(w.Start, now) {
			if fn != nil {
				fn(k, w)
			}
			delete(c.open, k)
		}
	}
}

// Prune removes the windows over at now, at most once a window, so that a
// counter whose callers never Close holds only about one window's keys.
func (c *Counter[T]) Prune(now time.Time) {
	if now.Before(c.pruneAt) {
		return
	}
	c.pruneAt = now.Add(c.Length)
	c.Close(now, false, nil)
}

// get returns key's window open at now, opening a new one when needed.
func (c *Counter[T]) get(key string, now time.Time) *Window[T] {
	if w := c.Current(key, now); w != nil {
		return w
	}
	if c.open == nil {
		c.open = make(map[string]*Window[T])
	}
	w := &Window[T]{Start: now}
	c.open[key] = w
	return w
}
