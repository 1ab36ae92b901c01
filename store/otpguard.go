package store

import (
	"time"
)

// OTPLockRule is how wrong login codes pause login by code for everyone:
// every Every wrong codes start a pause of Base, doubled once for each
// earlier pause, at most Max; the doubling steps back once for every Decay
// without a wrong code. The stores keep the state (OTPGuard) so that every
// box of a cluster shares one pause.
type OTPLockRule struct {
	Every int
	Base  time.Duration
	Max   time.Duration
	Decay time.Duration
}

// OTPGuard is the shared state of the pause.
type OTPGuard struct {
	Fails       int       // wrong codes since the last pause began
	Level       int       // pauses so far, less the decay
	LastFail    time.Time // the latest wrong code
	LockedUntil time.Time // the end of the current or last pause
}

// Length is the pause at level: Base doubled level times, at most Max.
func (r OTPLockRule) Length(level int) time.Duration {
	d := r.Base
	for i := 0; i < level && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Next returns the state after a wrong code at now, and whether that code
// started a pause.
func (r OTPLockRule) Next(g OTPGuard, now time.Time) (OTPGuard, bool) {
	if !g.LastFail.IsZero() && now.After(g.LastFail) && r.Decay > 0 {
		g.Level = max(0, g.Level-int(now.Sub(g.LastFail)/r.Decay))
	}
	g.LastFail = now
	g.Fails++
	if g.Fails < max(r.Every, 1) {
		return g, false
	}
	g.Fails = 0
	g.LockedUntil = now.Add(r.Length(g.Level))
	g.Level++
	return g, true
}
