package engine

import (
	"context"
	"testing"
	"time"
)

func TestCoresGrantsWithinTheBudget(t *testing.T) {
	c := NewCores(4)
	ctx := context.Background()
	if n, _ := c.Acquire(ctx, 1, 3); n != 3 {
		t.Fatalf("first grant %d, want 3", n)
	}
	if n, _ := c.Acquire(ctx, 1, 3); n != 1 {
		t.Fatalf("second grant %d, want the 1 left", n)
	}
	if c.Free() != 0 {
		t.Fatalf("free %d after granting the whole budget", c.Free())
	}
	// A waiter needing 3 is first in line: a later one needing 1 waits
	// behind it even when 1 core is free.
	big := make(chan int, 1)
	small := make(chan int, 1)
	go func() { n, _ := c.Acquire(ctx, 3, 3); big <- n }()
	waitFor(t, func() bool { return c.waiting() == 1 })
	go func() { n, _ := c.Acquire(ctx, 1, 4); small <- n }()
	waitFor(t, func() bool { return c.waiting() == 2 })
	c.Release(1) // the 1 taken second
	select {
	case <-small:
		t.Fatal("a later waiter overtook the first one")
	default:
	}
	c.Release(3)
	if n := <-big; n != 3 {
		t.Fatalf("first waiter got %d", n)
	}
	if n := <-small; n != 1 {
		t.Fatalf("second waiter got %d, want the 1 left", n)
	}
	c.Release(3)
	c.Release(1)
	if c.Free() != 4 {
		t.Fatalf("free %d after every release", c.Free())
	}
}

func TestCoresCancelledWaiterTakesNothing(t *testing.T) {
	c := NewCores(2)
	n, _ := c.Acquire(context.Background(), 2, 2)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Acquire(ctx, 2, 2); errc <- err }()
	waitFor(t, func() bool { return c.waiting() == 1 })
	// A waiter behind the cancelled one is served when it leaves.
	got := make(chan int, 1)
	go func() { n, _ := c.Acquire(context.Background(), 1, 1); got <- n }()
	waitFor(t, func() bool { return c.waiting() == 2 })
	c.Release(1)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if n := <-got; n != 1 {
		t.Fatalf("the waiter behind got %d", n)
	}
	c.Release(n - 1)
	c.Release(1)
	if c.Free() != 2 {
		t.Fatalf("free %d", c.Free())
	}
	var none *Cores
	if n, err := none.Acquire(context.Background(), 1, 3); n != 3 || err != nil {
		t.Fatalf("nil budget granted %d, %v", n, err)
	}
}

func (c *Cores) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// waitFor polls cond until it holds (other goroutines must reach a state).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTranscriptTokenCap(t *testing.T) {
	for _, tc := range []struct {
		speech time.Duration
		cap    int
	}{
		{0, 0}, {time.Second, 44}, {5 * time.Second, 92}, {30 * time.Second, 392}, {31 * time.Second, 32*2 + 372},
	} {
		if got := TranscriptTokenCap(tc.speech); got != tc.cap {
			t.Errorf("TranscriptTokenCap(%v) = %d, want %d", tc.speech, got, tc.cap)
		}
	}
	if got := TranscriptReserve(5 * time.Second); got != 2*92+16 {
		t.Errorf("TranscriptReserve(5s) = %d", got)
	}
}

func TestCoresIdleWorkComesLast(t *testing.T) {
	c := NewCores(2)
	ctx := context.Background()
	held, _ := c.Acquire(ctx, 2, 2)
	idle := make(chan int, 1)
	go func() { n, _ := c.AcquireIdle(ctx, 1, 2); idle <- n }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.idle) == 1 })
	busy := make(chan int, 1)
	go func() { n, _ := c.Acquire(ctx, 1, 1); busy <- n }()
	waitFor(t, func() bool { return c.waiting() == 1 })
	c.Release(held)
	// The later Acquire is served first; the idle work gets what is left.
	if n := <-busy; n != 1 {
		t.Fatalf("Acquire got %d", n)
	}
	if n := <-idle; n != 1 {
		t.Fatalf("AcquireIdle got %d, want the one core left", n)
	}
	c.Release(2)

	// While an Acquire waits, idle work does not take the free core.
	one, _ := c.Acquire(ctx, 1, 1)
	both := make(chan int, 1)
	go func() { n, _ := c.Acquire(ctx, 2, 2); both <- n }()
	waitFor(t, func() bool { return c.waiting() == 1 })
	go func() { n, _ := c.AcquireIdle(ctx, 1, 1); idle <- n }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.idle) == 1 })
	select {
	case <-idle:
		t.Fatal("idle work took a core an Acquire waits for")
	default:
	}
	c.Release(one)
	c.Release(<-both)
	if n := <-idle; n != 1 {
		t.Fatalf("AcquireIdle got %d", n)
	}
}

// TestLendCores: a transcription grows into cores that are free while
// nobody waits, gives back all but its own as soon as anybody waits (for
// Acquire or AcquireIdle), and never goes below its own.
func TestLendCores(t *testing.T) {
	c := NewCores(3)
	ctx := context.Background()
	base, _ := c.Acquire(ctx, 1, 1)
	held := lendCores(c, base, base, 3)
	if held != 3 || c.Free() != 0 {
		t.Fatalf("grew to %d (free %d), want all 3", held, c.Free())
	}
	// Somebody waits: back to its own 1, and the waiter is served.
	got := make(chan int, 1)
	go func() { n, _ := c.AcquireIdle(ctx, 1, 2); got <- n }()
	waitFor(t, func() bool { return c.Contended() })
	if held = lendCores(c, base, held, 3); held != 1 {
		t.Fatalf("held %d with a waiter, want 1", held)
	}
	if n := <-got; n != 2 {
		t.Fatalf("the waiter got %d, want the 2 given back", n)
	}
	// Nothing free: it keeps its own.
	if held = lendCores(c, base, held, 3); held != 1 {
		t.Fatalf("held %d with nothing free, want 1", held)
	}
	c.Release(2)
	// Asked for fewer than it holds (the encoder is done): gives back.
	if held = lendCores(c, base, held, 3); held != 3 {
		t.Fatalf("held %d", held)
	}
	if held = lendCores(c, base, held, 1); held != 1 || c.Free() != 2 {
		t.Fatalf("held %d, free %d after giving back; want 1 and 2", held, c.Free())
	}
	c.Release(held)
	if c.Free() != 3 {
		t.Fatalf("free %d at the end", c.Free())
	}
}
