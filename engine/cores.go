package engine

import (
	"context"
	"sync"
)

// Cores is the one CPU budget that the speech-to-text and language-model
// engines share. Both engines' thread pools spin while they wait for each
// other's threads (ggml's between the operations of a graph, OpenBLAS's
// between products), so a thread that loses its core to another busy thread
// stalls all of its pool: on two cores a request took 20-200x longer while
// the other engine ran. Every stage that runs threads takes that many cores
// from the budget first and gives them back when it ends, so the busy
// threads never exceed the cores.
//
// Waiters are served in arrival order: a stage that needs many cores is not
// overtaken forever by stages that need one. Work that only gets ahead
// (AcquireIdle) is served after all of them. The nil *Cores is no budget:
// Acquire grants the most asked for at once.
type Cores struct {
	mu      sync.Mutex
	total   int
	free    int
	waiters []*coreWaiter
	idle    []*coreWaiter // AcquireIdle's waiters, served when waiters is empty
}

type coreWaiter struct {
	lo, hi  int
	granted chan int
}

// NewCores returns a budget of n cores (at least 1).
func NewCores(n int) *Cores {
	n = max(n, 1)
	return &Cores{total: n, free: n}
}

// Total returns the size of the budget; 0 for the nil budget.
func (c *Cores) Total() int {
	if c == nil {
		return 0
	}
	return c.total
}

// Acquire waits until it is first in line and at least lo cores are free,
// then takes as many as are free, up to hi, and returns how many it took.
// lo and hi are clamped to 1..the budget. A caller that gets n cores must
// run at most n busy threads and call Release(n) when they have stopped. When
// ctx ends first, Acquire returns ctx's error and takes nothing.
func (c *Cores) Acquire(ctx context.Context, lo, hi int) (int, error) {
	return c.acquire(ctx, lo, hi, false)
}

// AcquireIdle is Acquire for work that is only done ahead of time (the
// prompt evaluated while speech-to-text runs): it is served after every
// waiter of Acquire, so it only ever takes cores nobody else asks for.
func (c *Cores) AcquireIdle(ctx context.Context, lo, hi int) (int, error) {
	return c.acquire(ctx, lo, hi, true)
}

func (c *Cores) acquire(ctx context.Context, lo, hi int, idle bool) (int, error) {
	if hi < 1 {
		hi = 1
	}
	if lo < 1 {
		lo = 1
	}
	if lo > hi {
		lo = hi
	}
	if c == nil {
		return hi, nil
	}
	if hi > c.total {
		hi = c.total
	}
	if lo > hi {
		lo = hi
	}
	c.mu.Lock()
	if len(c.waiters) == 0 && (!idle || len(c.idle) == 0) && c.free >= lo {
		n := c.take(hi)
		c.mu.Unlock()
		return n, nil
	}
	w := &coreWaiter{lo: lo, hi: hi, granted: make(chan int, 1)}
	queue := &c.waiters
	if idle {
		queue = &c.idle
	}
	*queue = append(*queue, w)
	c.mu.Unlock()
	select {
	case n := <-w.granted:
		return n, nil
	case <-ctx.Done():
		c.mu.Lock()
		for i, x := range *queue {
			if x == w {
				*queue = append((*queue)[:i], (*queue)[i+1:]...)
				break
			}
		}
		// The waiters behind it may be served now.
		c.grant()
		c.mu.Unlock()
		// A grant may have raced the cancellation: give it back.
		select {
		case n := <-w.granted:
			c.Release(n)
		default:
		}
		return 0, ctx.Err()
	}
}

// TryAcquire takes up to max free cores without waiting, and only when
// nobody waits for cores; it returns how many it took (maybe 0). The caller
// gives them back with Release.
func (c *Cores) TryAcquire(max int) int {
	if c == nil || max < 1 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) > 0 {
		return 0
	}
	return c.take(max)
}

// Release gives back n cores taken with Acquire.
func (c *Cores) Release(n int) {
	if c == nil || n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.free = min(c.free+n, c.total)
	c.grant()
}

// grant serves the waiters at the head of the line while enough cores are
// free, then the idle waiters when no other waits; c.mu is held.
func (c *Cores) grant() {
	for len(c.waiters) > 0 && c.free >= c.waiters[0].lo {
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		w.granted <- c.take(w.hi)
	}
	for len(c.waiters) == 0 && len(c.idle) > 0 && c.free >= c.idle[0].lo {
		w := c.idle[0]
		c.idle = c.idle[1:]
		w.granted <- c.take(w.hi)
	}
}

// take removes up to max free cores; c.mu is held.
func (c *Cores) take(max int) int {
	n := min(c.free, max)
	c.free -= n
	return n
}

// Contended reports whether anybody waits for cores, with Acquire or
// AcquireIdle.
func (c *Cores) Contended() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) > 0 || len(c.idle) > 0
}

// Waiting returns how many callers of Acquire wait for cores.
func (c *Cores) Waiting() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Free returns how many cores nobody holds.
func (c *Cores) Free() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.free
}
