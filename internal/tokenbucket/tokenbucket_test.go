package tokenbucket

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestTakeSpendsTheBurstThenWaitsForTheRefill: a new bucket holds burst
// tokens; once they are spent a request waits for the next token, exactly
// as long as the rate says, rounded up to the millisecond.
func TestTakeSpendsTheBurstThenWaitsForTheRefill(t *testing.T) {
	rate := PerMinute(100) // a token every 600 ms
	var b Bucket
	for i := range 10 {
		var ok bool
		b, ok, _ = b.Take(t0, 10, rate)
		if !ok {
			t.Fatalf("request %d of a burst of 10 refused", i+1)
		}
	}
	after, ok, wait := b.Take(t0, 10, rate)
	if ok || wait != 600*time.Millisecond {
		t.Fatalf("11th request at once: ok %v, wait %s; want refused, 600ms", ok, wait)
	}
	if after.Tokens != 0 || !after.At.Equal(t0) {
		t.Errorf("a refused request must take nothing: %+v", after)
	}
	// 250 ms later: 350 ms to go, a part of a token refilled.
	if _, ok, wait := after.Take(t0.Add(250*time.Millisecond), 10, rate); ok || wait != 350*time.Millisecond {
		t.Errorf("at +250ms: ok %v, wait %s; want refused, 350ms", ok, wait)
	}
	b, ok, _ = after.Take(t0.Add(600*time.Millisecond), 10, rate)
	if !ok || b.Tokens > 1e-9 {
		t.Errorf("at +600ms: ok %v, %v tokens left; want one taken, none left", ok, b.Tokens)
	}
	// A wait of a fraction of a millisecond rounds up to a whole one.
	if _, _, wait := b.Take(t0.Add(600*time.Millisecond+599_500*time.Microsecond), 10, rate); wait != time.Millisecond {
		t.Errorf("half a millisecond before the next token: wait %s; want 1ms", wait)
	}
}

// TestLevelIsCappedAndNeverRefillsBackwards: a bucket refills up to its
// burst and no further; a time before its last request (another box's
// clock) refills nothing and does not move the bucket's time back.
func TestLevelIsCappedAndNeverRefillsBackwards(t *testing.T) {
	rate := Every(10 * time.Minute)
	b := Bucket{Tokens: 0.5, At: t0}
	if got := b.Level(t0.Add(5*time.Minute), 3, rate); got != 1 {
		t.Errorf("half a token and half a refill: %v tokens; want 1", got)
	}
	if got := b.Level(t0.Add(24*time.Hour), 3, rate); got != 3 {
		t.Errorf("a day later: %v tokens; want the burst, 3", got)
	}
	if got := b.Level(t0.Add(-time.Hour), 3, rate); got != 0.5 {
		t.Errorf("an hour before its last request: %v tokens; want 0.5", got)
	}
	after, ok, wait := b.Take(t0.Add(-time.Hour), 3, rate)
	if ok || !after.At.Equal(t0) || wait != 5*time.Minute {
		t.Errorf("a request an hour early: %+v ok %v wait %s; want refused, kept at t0, 5m to wait", after, ok, wait)
	}
	if got := (Bucket{}).Level(t0, 3, rate); got != 3 {
		t.Errorf("the zero bucket holds %v; want full, 3", got)
	}
}

func TestGiveReturnsATokenUpToTheBurst(t *testing.T) {
	rate := Every(time.Minute)
	b, _, _ := Bucket{}.Take(t0, 2, rate)
	if b = b.Give(2); b.Tokens != 2 {
		t.Errorf("after a take and a give: %v tokens; want 2", b.Tokens)
	}
	if b = b.Give(2); b.Tokens != 2 {
		t.Errorf("a give to a full bucket: %v tokens; want 2", b.Tokens)
	}
}

func TestFull(t *testing.T) {
	if got := Full(10, PerMinute(100)); got != 6*time.Second {
		t.Errorf("burst 10 at 100 a minute: full after %s; want 6s", got)
	}
	if got := Full(3, Every(10*time.Minute)); got != 30*time.Minute {
		t.Errorf("burst 3, one every 10 minutes: full after %s; want 30m", got)
	}
}

// TestARefillOfExactlyOneTokenIsOne: a bucket emptied and left alone for
// exactly one token's time has a whole token, whatever the rate (1/d in
// floating point would leave it a hair short and refuse the request).
func TestARefillOfExactlyOneTokenIsOne(t *testing.T) {
	for _, c := range []struct {
		rate  Rate
		token time.Duration
	}{
		{Every(5 * time.Minute), 5 * time.Minute},
		{Every(10 * time.Minute), 10 * time.Minute},
		{Every(7 * time.Second), 7 * time.Second},
		{PerMinute(100), 600 * time.Millisecond},
		{PerMinute(7), time.Minute / 7},
	} {
		empty := Bucket{Tokens: 0, At: t0}
		if got := empty.Level(t0.Add(c.token), 6, c.rate); got < 1-1e-9 {
			t.Errorf("%+v after %s: %v tokens", c.rate, c.token, got)
		}
		if c.token%time.Millisecond == 0 {
			if _, ok, wait := empty.Take(t0.Add(c.token), 6, c.rate); !ok {
				t.Errorf("%+v after %s: refused, wait %s", c.rate, c.token, wait)
			}
		}
	}
}
