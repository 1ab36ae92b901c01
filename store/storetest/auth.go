package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

func adminKeyHash(t *testing.T, e Env) {
	s := e.S
	if h, err := s.AdminKeyHash(); err != nil || h != "" {
		t.Fatalf("empty store: %q, %v", h, err)
	}
	Must(t, s.SetAdminKeyHash("h1"))
	Must(t, s.SetAdminKeyHash("h2"))
	if h, _ := s.AdminKeyHash(); h != "h2" {
		t.Errorf("AdminKeyHash = %q, want h2", h)
	}
	Must(t, s.SetAdminKeyHash(""))
	if h, _ := s.AdminKeyHash(); h != "" {
		t.Errorf("after clearing: %q", h)
	}
	Must(t, s.SetAdminKeyHash(""))
}

// adminKeyIfAbsent: the first admin key is set only where none is, and of
// concurrent first starts (goroutines here, boxes in a cluster) exactly one
// wins; every caller then reads the winner's hash.
func adminKeyIfAbsent(t *testing.T, e Env) {
	s := e.S
	if _, err := s.SetAdminKeyHashIfAbsent(""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty hash: %v, want ErrInvalid", err)
	}
	won := make([]bool, 16)
	errs := concurrently(len(won), func(i int) error {
		var err error
		won[i], err = s.SetAdminKeyHashIfAbsent(fmt.Sprintf("first-%d", i))
		return err
	})
	winner := -1
	for i, err := range errs {
		Must(t, err)
		if won[i] {
			if winner >= 0 {
				t.Fatalf("callers %d and %d both stored their hash", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no caller stored its hash")
	}
	if h, err := s.AdminKeyHash(); err != nil || h != fmt.Sprintf("first-%d", winner) {
		t.Fatalf("AdminKeyHash = %q, %v; want the winner's first-%d", h, err, winner)
	}
	// Set already: nothing changes.
	if ok, err := s.SetAdminKeyHashIfAbsent("later"); err != nil || ok {
		t.Errorf("over a stored hash: %v, %v; want false", ok, err)
	}
	// SetAdminKeyHash still replaces; after a removal the next first key wins.
	Must(t, s.SetAdminKeyHash(""))
	if ok, err := s.SetAdminKeyHashIfAbsent("again"); err != nil || !ok {
		t.Errorf("after removal: %v, %v; want true", ok, err)
	}
	if h, _ := s.AdminKeyHash(); h != "again" {
		t.Errorf("AdminKeyHash = %q, want again", h)
	}
}

func otpLifecycle(t *testing.T, e Env) {
	s := e.S
	exp := T0.Add(5 * time.Minute)
	use := func(scope, hash string, now time.Time, want bool) {
		t.Helper()
		got, err := s.UseOTP(scope, hash, now)
		Must(t, err)
		if got != want {
			t.Errorf("UseOTP(%q, %q) = %v, want %v", scope, hash, got, want)
		}
	}
	use("10.0.0.1", "x", T0, false)

	// Single use.
	mustSaveOTP(t, s, "10.0.0.1", "good", T0, exp)
	use("10.0.0.1", "bad", T0, false)
	use("10.0.0.1", "good", T0, true)
	use("10.0.0.1", "good", T0, false)

	// Wrong guesses never burn the code.
	mustSaveOTP(t, s, "10.0.0.1", "good", T0, exp)
	for i := 0; i < 20; i++ {
		use("10.0.0.1", fmt.Sprintf("bad%d", i), T0, false)
	}
	use("10.0.0.1", "good", T0, true)

	// Scopes are separate: a code works only from its own scope, and a new
	// code for one scope leaves the others alone.
	mustSaveOTP(t, s, "10.0.0.1", "one", T0, exp)
	mustSaveOTP(t, s, "10.0.0.2", "two", T0, exp)
	use("10.0.0.2", "one", T0, false)
	mustSaveOTP(t, s, "10.0.0.2", "two-again", T0.Add(time.Minute), exp)
	use("10.0.0.2", "two", T0, false) // replaced
	use("10.0.0.1", "one", T0, true)
	use("10.0.0.2", "two-again", T0, true)

	// Expiry is exclusive.
	mustSaveOTP(t, s, "s", "good", T0, exp)
	use("s", "good", exp, false)
	use("s", "good", exp.Add(-time.Nanosecond), true)
}

// otpDeletePrune: DeleteOTP removes one scope's code; PruneOTPs removes the
// expired ones and leaves the live ones.
func otpDeletePrune(t *testing.T, e Env) {
	s := e.S
	exp := T0.Add(5 * time.Minute)
	mustSaveOTP(t, s, "a", "h", T0, exp)
	mustSaveOTP(t, s, "b", "h", T0, T0.Add(time.Minute))
	mustSaveOTP(t, s, "c", "h", T0, exp)
	Must(t, s.DeleteOTP("c"))
	Must(t, s.DeleteOTP("never-existed"))
	if ok, _ := s.UseOTP("c", "h", T0); ok {
		t.Error("a deleted code was used")
	}
	n, err := s.PruneOTPs(T0.Add(time.Minute)) // b's expiry: inclusive
	Must(t, err)
	if n != 1 {
		t.Errorf("PruneOTPs = %d, want 1", n)
	}
	if ok, _ := s.UseOTP("a", "h", T0); !ok {
		t.Error("pruning removed a live code")
	}
	if n, _ := s.PruneOTPs(T0.Add(time.Hour)); n != 0 {
		t.Errorf("PruneOTPs on no codes = %d", n)
	}
}

func otpInvalid(t *testing.T, e Env) {
	_, err := e.S.SaveOTP("10.0.0.1", "", T0, T0.Add(time.Minute), 0)
	wantErr(t, "SaveOTP with empty hash", err, store.ErrInvalid)
	_, err = e.S.SaveOTP("", "h", T0, T0.Add(time.Minute), 0)
	wantErr(t, "SaveOTP with empty scope", err, store.ErrInvalid)
	wantErr(t, "negative TOTP step", func() error { _, err := e.S.UseTOTPStep(-1); return err }(), store.ErrInvalid)
}

// otpConcurrentRight uses the right code from many goroutines at once (on
// PostgreSQL: many boxes): exactly one logs in.
func otpConcurrentRight(t *testing.T, e Env) {
	mustSaveOTP(t, e.S, "10.0.0.1", "good", T0, T0.Add(time.Minute))
	if n := wins(t, 12, func() (bool, error) { return e.S.UseOTP("10.0.0.1", "good", T0) }); n != 1 {
		t.Errorf("%d of 12 concurrent uses of the right code succeeded, want 1", n)
	}
}

// totpSteps: each step is accepted once, and only steps later than every
// step accepted before; concurrent uses of one step: exactly one.
func totpSteps(t *testing.T, e Env) {
	for _, tc := range []struct {
		step int64
		want bool
	}{{100, true}, {100, false}, {99, false}, {101, true}, {103, true}, {102, false}} {
		got, err := e.S.UseTOTPStep(tc.step)
		Must(t, err)
		if got != tc.want {
			t.Errorf("UseTOTPStep(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	if n := wins(t, 10, func() (bool, error) { return e.S.UseTOTPStep(200) }); n != 1 {
		t.Errorf("%d of 10 concurrent uses of one step succeeded, want 1", n)
	}
}

// secrets: InstallationSecret gets or creates (32 random bytes, the same
// for every caller, concurrent ones included); Secret and SetSecret get and
// set without creating; an empty value deletes.
func secrets(t *testing.T, e Env) {
	s := e.S
	results := make([][]byte, 8)
	errs := concurrently(len(results), func(i int) error {
		var err error
		results[i], err = s.InstallationSecret(store.SecretPseudonym)
		return err
	})
	for i, err := range errs {
		Must(t, err)
		if len(results[i]) != 32 || string(results[i]) != string(results[0]) {
			t.Fatalf("concurrent InstallationSecret: %x and %x", results[i], results[0])
		}
	}
	again, err := s.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	other, err := s.InstallationSecret("other")
	Must(t, err)
	if string(again) != string(results[0]) || string(other) == string(again) {
		t.Error("InstallationSecret is not stable, or two names share a value")
	}
	if _, ok, err := s.Secret(store.SecretTOTP); err != nil || ok {
		t.Errorf("Secret before SetSecret: ok %v, %v", ok, err)
	}
	Must(t, s.SetSecret(store.SecretTOTP, []byte("JBSWY3DPEHPK3PXP")))
	Must(t, s.SetSecret(store.SecretTOTP, []byte("KRSXG5CTMVRXEZLU")))
	if v, ok, err := s.Secret(store.SecretTOTP); err != nil || !ok || string(v) != "KRSXG5CTMVRXEZLU" {
		t.Errorf("Secret = %q %v %v", v, ok, err)
	}
	Must(t, s.SetSecret(store.SecretTOTP, nil))
	if _, ok, _ := s.Secret(store.SecretTOTP); ok {
		t.Error("an empty SetSecret did not delete")
	}
	wantErr(t, "SetSecret with empty name", s.SetSecret("", []byte("x")), store.ErrInvalid)
	_, err = s.InstallationSecret("")
	wantErr(t, "InstallationSecret with empty name", err, store.ErrInvalid)
}

func sessionsLifecycle(t *testing.T, e Env) {
	s := e.S
	exp := T0.Add(time.Hour)
	Must(t, s.CreateSession("s1", exp))
	Must(t, s.CreateSession("s2", T0.Add(time.Minute)))
	Must(t, s.CreateSession("s3", T0.Add(2*time.Minute))) // expires exactly at the prune time
	wantErr(t, "duplicate session", s.CreateSession("s1", exp), store.ErrExists)
	wantErr(t, "empty session hash", s.CreateSession("", exp), store.ErrInvalid)
	valid := func(h string, now time.Time) bool {
		t.Helper()
		ok, err := s.SessionValid(h, now)
		Must(t, err)
		return ok
	}
	if !valid("s1", T0) || !valid("s1", exp.Add(-time.Nanosecond)) {
		t.Error("s1 not valid before expiry")
	}
	if valid("s1", exp) || valid("nope", T0) {
		t.Error("expired or unknown session valid")
	}
	if !valid("s2", T0) {
		t.Error("s2 not valid before expiry")
	}
	n, err := s.PruneSessions(T0.Add(2 * time.Minute))
	Must(t, err)
	if n != 2 {
		t.Errorf("PruneSessions = %d, want 2", n)
	}
	if valid("s2", T0) || valid("s3", T0) {
		t.Error("pruned session still valid")
	}
	if !valid("s1", T0) {
		t.Error("pruning removed a live session")
	}
	Must(t, s.DeleteSession("s1"))
	Must(t, s.DeleteSession("s1"))
	if valid("s1", T0) {
		t.Error("deleted session still valid")
	}
	if n, _ := s.PruneSessions(T0.Add(24 * time.Hour)); n != 0 {
		t.Errorf("PruneSessions on no sessions = %d", n)
	}
}

// mustSaveOTP saves a code with no resend interval.
func mustSaveOTP(t testing.TB, s store.Store, scope, hash string, issued, expires time.Time) {
	t.Helper()
	retry, err := s.SaveOTP(scope, hash, issued, expires, 0)
	Must(t, err)
	if retry != 0 {
		t.Fatalf("SaveOTP(%q) without a resend interval: retry %s", scope, retry)
	}
}

// otpResend: a scope may get a new code only resend after its outstanding
// one was issued (on every box: of concurrent sends, exactly one is saved);
// the refused send leaves the earlier code working; a used or deleted code
// holds nothing back; other scopes are not held back.
func otpResend(t *testing.T, e Env) {
	s := e.S
	exp := T0.Add(5 * time.Minute)
	save := func(scope, hash string, at time.Time, wantRetry time.Duration) {
		t.Helper()
		retry, err := s.SaveOTP(scope, hash, at, exp, 30*time.Second)
		Must(t, err)
		if retry != wantRetry {
			t.Errorf("SaveOTP(%s, %s, T0+%s) retry = %s, want %s", scope, hash, at.Sub(T0), retry, wantRetry)
		}
	}
	save("10.0.0.1", "first", T0, 0)
	save("10.0.0.1", "second", T0.Add(10*time.Second), 20*time.Second)
	save("10.0.0.2", "other", T0.Add(10*time.Second), 0)
	if ok, _ := s.UseOTP("10.0.0.1", "first", T0.Add(11*time.Second)); !ok {
		t.Error("a refused send replaced the code")
	}
	// A used code is gone: the next one may be asked for at once.
	save("10.0.0.1", "third", T0.Add(15*time.Second), 0)
	save("10.0.0.1", "fourth", T0.Add(20*time.Second), 25*time.Second)
	save("10.0.0.1", "fifth", T0.Add(45*time.Second), 0)
	if ok, _ := s.UseOTP("10.0.0.1", "fifth", T0.Add(46*time.Second)); !ok {
		t.Error("the code saved after the interval does not work")
	}
	retries := make([]time.Duration, 10)
	errs := concurrently(len(retries), func(i int) error {
		var err error
		retries[i], err = s.SaveOTP("10.0.0.9", fmt.Sprint("c", i), T0, exp, 30*time.Second)
		return err
	})
	saved := 0
	for i, err := range errs {
		Must(t, err)
		if retries[i] == 0 {
			saved++
		}
	}
	if saved != 1 {
		t.Errorf("%d of %d concurrent sends saved a code, want 1", saved, len(retries))
	}
}

// otpGuardShared: every Every wrong codes start a pause of doubling length;
// OTPLock reports it while it lasts; concurrent failures (many boxes) are
// each counted once; a quiet Decay steps the doubling back.
func otpGuardShared(t *testing.T, e Env) {
	s := e.S
	rule := store.OTPLockRule{Every: 3, Base: time.Minute, Max: time.Hour, Decay: 24 * time.Hour}
	lock := func(at time.Time) time.Time {
		t.Helper()
		u, err := s.OTPLock("", at)
		Must(t, err)
		return u
	}
	if !lock(T0).IsZero() {
		t.Fatal("a fresh store is paused")
	}
	fail := func(at time.Time) time.Time {
		t.Helper()
		u, err := s.OTPFailed("", "10.0.0.1", at, rule)
		Must(t, err)
		return u
	}
	if !fail(T0).IsZero() || !fail(T0).IsZero() {
		t.Fatal("a pause before the third wrong code")
	}
	if u := fail(T0); !u.Equal(T0.Add(time.Minute)) {
		t.Fatalf("the third wrong code paused until %v, want T0+1m", u)
	}
	if u := lock(T0.Add(30 * time.Second)); !u.Equal(T0.Add(time.Minute)) {
		t.Errorf("OTPLock during the pause = %v", u)
	}
	if !lock(T0.Add(time.Minute)).IsZero() {
		t.Error("OTPLock after the pause")
	}
	// Three more at once, as from three boxes: one pause of 2 minutes.
	at := T0.Add(2 * time.Minute)
	results := make([]time.Time, 3)
	errs := concurrently(3, func(i int) error {
		var err error
		results[i], err = s.OTPFailed("", "10.0.0.1", at, rule)
		return err
	})
	started := 0
	for i, err := range errs {
		Must(t, err)
		if !results[i].IsZero() {
			started++
			if !results[i].Equal(at.Add(2 * time.Minute)) {
				t.Errorf("second pause until %v, want +2m", results[i])
			}
		}
	}
	if started != 1 {
		t.Errorf("%d of 3 concurrent wrong codes started a pause, want 1", started)
	}
	// Two quiet days step the doubling back twice: 1 minute again.
	later := at.Add(48 * time.Hour)
	fail(later)
	fail(later)
	if u := fail(later); !u.Equal(later.Add(time.Minute)) {
		t.Errorf("after two quiet days the pause ends %v, want +1m", u)
	}
	if l := rule.Length(40); l != time.Hour {
		t.Errorf("Length(40) = %s, want the maximum", l)
	}
}

// otpGuardScopes: each scope has a guard of its own (one address's wrong
// codes pause only that address); a rule with Sources 2 pauses only once
// wrong codes came from two sources, and then for all of them; the guard's
// state carries Sources; PruneOTPs forgets idle scoped guards only.
func otpGuardScopes(t *testing.T, e Env) {
	s := e.S
	addr := store.OTPLockRule{Every: 3, Base: time.Minute, Max: time.Hour, Decay: 24 * time.Hour}
	global := addr
	global.Sources = 2
	fail := func(scope, source string, at time.Time, rule store.OTPLockRule) time.Time {
		t.Helper()
		u, err := s.OTPFailed(scope, source, at, rule)
		Must(t, err)
		return u
	}
	lock := func(scope string, at time.Time) time.Time {
		t.Helper()
		u, err := s.OTPLock(scope, at)
		Must(t, err)
		return u
	}
	// Three wrong codes from 10.0.0.2: its scope pauses, 10.0.0.1's and
	// the global one do not.
	for i := range 3 {
		u := fail("addr:10.0.0.2", "10.0.0.2", T0, addr)
		if (i == 2) != !u.IsZero() {
			t.Fatalf("wrong code %d from one address: pause %v", i+1, u)
		}
		if u := fail("", "10.0.0.2", T0, global); !u.IsZero() {
			t.Fatalf("wrong codes from one source paused the global guard until %v", u)
		}
	}
	if u := lock("addr:10.0.0.2", T0); !u.Equal(T0.Add(time.Minute)) {
		t.Errorf("the address's pause = %v, want T0+1m", u)
	}
	if !lock("addr:10.0.0.1", T0).IsZero() || !lock("", T0).IsZero() {
		t.Error("one address's wrong codes paused another scope")
	}
	// Three more from the same source keep the global guard open; one from
	// a second source pauses it, charged for all seven: two lengths.
	at := T0.Add(2 * time.Minute)
	for range 3 {
		if u := fail("", "10.0.0.2", at, global); !u.IsZero() {
			t.Fatalf("one source paused the global guard until %v", u)
		}
	}
	if u := fail("", "10.0.0.3", at, global); !u.Equal(at.Add(time.Minute + 2*time.Minute)) {
		t.Errorf("the global pause after 7 wrong codes from two sources ends %v, want +3m", u)
	}
	if u := lock("", at); !u.Equal(at.Add(3 * time.Minute)) {
		t.Errorf("OTPLock of the global guard = %v", u)
	}
	// Concurrent wrong codes from two sources (as from two boxes) are each
	// counted once: every pause turns Every of them into one level.
	at = at.Add(time.Hour)
	errs := concurrently(6, func(i int) error {
		_, err := s.OTPFailed("", fmt.Sprint("10.0.1.", i%2), at, global)
		return err
	})
	for _, err := range errs {
		Must(t, err)
	}
	Must(t, s.Snapshot(func(snap store.Snapshot) error {
		g := snap.OTPGuard
		if n := 3*(g.Level-2) + g.Fails; n != 1+6 {
			t.Errorf("global guard after 6 concurrent wrong codes: level %d, fails %d: %d counted, want 7", g.Level, g.Fails, n)
		}
		return nil
	}))
	// Pruning: codes as before; an idle address guard goes, a paused or
	// recent one and the global one stay.
	_ = fail("addr:10.0.0.9", "10.0.0.9", at, addr)
	later := T0.Add(store.OTPGuardIdle + 2*time.Minute)
	if _, err := s.PruneOTPs(later); err != nil {
		t.Fatal(err)
	}
	Must(t, s.Snapshot(func(snap store.Snapshot) error {
		if _, ok := snap.OTPGuards["addr:10.0.0.2"]; ok {
			t.Error("an idle address guard was kept")
		}
		if _, ok := snap.OTPGuards["addr:10.0.0.9"]; !ok {
			t.Error("a recent address guard was forgotten")
		}
		if snap.OTPGuard.LastFail.IsZero() {
			t.Error("the global guard was forgotten")
		}
		return nil
	}))
}

// wins runs use n times at once and returns how many of them returned true;
// an error fails the test.
func wins(t *testing.T, n int, use func() (bool, error)) int {
	t.Helper()
	results := make([]bool, n)
	errs := concurrently(n, func(i int) error {
		var err error
		results[i], err = use()
		return err
	})
	won := 0
	for i, err := range errs {
		Must(t, err)
		if results[i] {
			won++
		}
	}
	return won
}
