package store

import (
	"slices"
	"time"
)

// OTPLockRule is how wrong login codes pause login by code for everyone:
// every Every wrong codes start a pause of Base, doubled once for each
// earlier pause, at most Max; the doubling steps back once for every Decay
// without a wrong code. The stores keep the state (OTPGuard) so that every
// box of a cluster shares one pause.
//
// Sources > 1 makes a guard that several addresses must trip: a pause
// starts only once the wrong codes since the last one came from at least
// Sources distinct sources (client address buckets); until then they are
// counted, and the pause that then starts is charged for all of them: one
// pause length for every Every wrong codes, each at the next level, so
// that wrong codes from one source alone are paused later but never for
// less in all.
type OTPLockRule struct {
	Every   int
	Base    time.Duration
	Max     time.Duration
	Decay   time.Duration
	Sources int
}

// OTPGuard is the shared state of the pause.
type OTPGuard struct {
	Fails       int       // wrong codes since the last pause began
	Level       int       // pauses so far, less the decay
	LastFail    time.Time // the latest wrong code
	LockedUntil time.Time // the end of the current or last pause
	// Sources are the distinct sources of the wrong codes since the last
	// pause, at most the rule's Sources of them.
	Sources []string `json:",omitempty"`
}

// OTPGuardIdle is how long a guard of a scope other than "" (one client
// address) must have been quiet, and not paused, before PruneOTPs forgets
// it: long enough that any level has decayed (a day a level). Forgetting
// it gives that address at most Every-1 more wrong codes before its next
// pause, once in OTPGuardIdle.
const OTPGuardIdle = 30 * 24 * time.Hour

// Idle reports whether PruneOTPs may forget the guard at now.
func (g OTPGuard) Idle(now time.Time) bool {
	return !now.Before(g.LockedUntil) && !now.Before(g.LastFail.Add(OTPGuardIdle))
}

// Length is the pause at level: Base doubled level times, at most Max.
func (r OTPLockRule) Length(level int) time.Duration {
	d := r.Base
	for i := 0; i < level && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Next returns the state after a wrong code from source at now, and
// whether that code started a pause.
func (r OTPLockRule) Next(g OTPGuard, source string, now time.Time) (OTPGuard, bool) {
	if !g.LastFail.IsZero() && now.After(g.LastFail) && r.Decay > 0 {
		g.Level = max(0, g.Level-int(now.Sub(g.LastFail)/r.Decay))
	}
	g.LastFail = now
	g.Fails++
	if r.Sources > 1 && !slices.Contains(g.Sources, source) && len(g.Sources) < r.Sources {
		g.Sources = append(slices.Clone(g.Sources), source)
	}
	every := max(r.Every, 1)
	if g.Fails < every || (r.Sources > 1 && len(g.Sources) < r.Sources) {
		return g, false
	}
	var d time.Duration
	for range g.Fails / every {
		d += r.Length(g.Level)
		g.Level++
	}
	g.Fails %= every
	g.Sources = nil
	g.LockedUntil = now.Add(d)
	return g, true
}
