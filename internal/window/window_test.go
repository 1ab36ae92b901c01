package window

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// TestAllowAndRefund: a window admits limit events, refuses the next with
// the time until it closes, opens afresh after Length, and a refund gives
// one back only inside the window.
func TestAllowAndRefund(t *testing.T) {
	c := New[struct{}](time.Minute)
	for i := 0; i < 3; i++ {
		if ok, _ := c.Allow("k", 3, t0.Add(time.Duration(i)*time.Second)); !ok {
			t.Fatalf("event %d refused", i+1)
		}
	}
	if ok, retry := c.Allow("k", 3, t0.Add(20*time.Second)); ok || retry != 40*time.Second {
		t.Errorf("fourth event: %t, retry %s; want refused, 40s", ok, retry)
	}
	if ok, _ := c.Allow("other", 3, t0.Add(20*time.Second)); !ok {
		t.Error("another key shares the window")
	}
	c.Refund("k", t0.Add(30*time.Second))
	if ok, _ := c.Allow("k", 3, t0.Add(31*time.Second)); !ok {
		t.Error("a refunded event was not given back")
	}
	if ok, _ := c.Allow("k", 3, t0.Add(time.Minute)); !ok {
		t.Error("the window did not close after Length")
	}
	c.Refund("gone", t0)
	if ok, _ := c.Allow("k", 0, t0); !ok {
		t.Error("a limit of 0 refused")
	}
}

// TestClockSkew: a time slightly before a window's start counts in it; one
// more than a window before it opens a new window.
func TestClockSkew(t *testing.T) {
	c := New[struct{}](time.Minute)
	c.Add("k", t0)
	if w := c.Current("k", t0.Add(-30*time.Second)); w == nil || w.N != 1 {
		t.Errorf("30 s before the start: %+v, want the open window", w)
	}
	if w := c.Current("k", t0.Add(-61*time.Second)); w != nil {
		t.Errorf("61 s before the start: %+v, want none", w)
	}
	if w := c.Add("k", t0.Add(-61*time.Second)); w.N != 1 || !w.Start.Equal(t0.Add(-61*time.Second)) {
		t.Errorf("an event 61 s before the start did not open a new window: %+v", w)
	}
}

// TestCloseAndPrune: Close hands over the windows that are over (all of them
// when asked) with their data; Prune drops them at most once a window.
func TestCloseAndPrune(t *testing.T) {
	c := New[[]string](time.Minute)
	w := c.Add("a", t0)
	w.Data = append(w.Data, "x")
	c.Add("b", t0.Add(30*time.Second))
	var closed []string
	c.Close(t0.Add(time.Minute), false, func(k string, w *Window[[]string]) {
		closed = append(closed, k)
		if k == "a" && (w.N != 1 || len(w.Data) != 1) {
			t.Errorf("a's window %+v", w)
		}
	})
	if len(closed) != 1 || closed[0] != "a" || c.Len() != 1 {
		t.Errorf("closed %v, %d left; want [a], 1", closed, c.Len())
	}
	c.Close(t0.Add(time.Minute), true, nil)
	if c.Len() != 0 {
		t.Errorf("%d windows after closing all", c.Len())
	}

	c.Add("a", t0)
	c.Prune(t0) // nothing over yet; the next prune waits a window
	c.Add("b", t0.Add(30*time.Second))
	c.Prune(t0.Add(50 * time.Second))
	if c.Len() != 2 {
		t.Errorf("%d windows after an early prune, want 2", c.Len())
	}
	c.Prune(t0.Add(70 * time.Second))
	if c.Len() != 1 || c.Current("b", t0.Add(70*time.Second)) == nil {
		t.Errorf("after pruning at 70 s: %d windows, want b's alone", c.Len())
	}
}
