package storetest

import (
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
	Must(t, s.SaveOTP("10.0.0.1", "good", T0, exp))
	use("10.0.0.1", "bad", T0, false)
	use("10.0.0.1", "good", T0, true)
	use("10.0.0.1", "good", T0, false)

	// Wrong guesses never burn the code.
	Must(t, s.SaveOTP("10.0.0.1", "good", T0, exp))
	for i := 0; i < 20; i++ {
		use("10.0.0.1", fmt.Sprintf("bad%d", i), T0, false)
	}
	use("10.0.0.1", "good", T0, true)

	// Scopes are separate: a code works only from its own scope, and a new
	// code for one scope leaves the others alone.
	Must(t, s.SaveOTP("10.0.0.1", "one", T0, exp))
	Must(t, s.SaveOTP("10.0.0.2", "two", T0, exp))
	use("10.0.0.2", "one", T0, false)
	Must(t, s.SaveOTP("10.0.0.2", "two-again", T0.Add(time.Minute), exp))
	use("10.0.0.2", "two", T0, false) // replaced
	use("10.0.0.1", "one", T0, true)
	use("10.0.0.2", "two-again", T0, true)

	// Expiry is exclusive.
	Must(t, s.SaveOTP("s", "good", T0, exp))
	use("s", "good", exp, false)
	use("s", "good", exp.Add(-time.Nanosecond), true)
}

// otpDeletePrune: DeleteOTP removes one scope's code; PruneOTPs removes the
// expired ones and leaves the live ones.
func otpDeletePrune(t *testing.T, e Env) {
	s := e.S
	exp := T0.Add(5 * time.Minute)
	Must(t, s.SaveOTP("a", "h", T0, exp))
	Must(t, s.SaveOTP("b", "h", T0, T0.Add(time.Minute)))
	Must(t, s.SaveOTP("c", "h", T0, exp))
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
	wantErr(t, "SaveOTP with empty hash", e.S.SaveOTP("10.0.0.1", "", T0, T0.Add(time.Minute)), store.ErrInvalid)
	wantErr(t, "SaveOTP with empty scope", e.S.SaveOTP("", "h", T0, T0.Add(time.Minute)), store.ErrInvalid)
	wantErr(t, "negative TOTP step", func() error { _, err := e.S.UseTOTPStep(-1); return err }(), store.ErrInvalid)
}

// otpConcurrentRight uses the right code from many goroutines at once (on
// PostgreSQL: many boxes): exactly one logs in.
func otpConcurrentRight(t *testing.T, e Env) {
	Must(t, e.S.SaveOTP("10.0.0.1", "good", T0, T0.Add(time.Minute)))
	results := make([]bool, 12)
	errs := concurrently(len(results), func(i int) error {
		var err error
		results[i], err = e.S.UseOTP("10.0.0.1", "good", T0)
		return err
	})
	n := 0
	for i, err := range errs {
		Must(t, err)
		if results[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of %d concurrent uses of the right code succeeded, want 1", n, len(results))
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
	results := make([]bool, 10)
	errs := concurrently(len(results), func(i int) error {
		var err error
		results[i], err = e.S.UseTOTPStep(200)
		return err
	})
	n := 0
	for i, err := range errs {
		Must(t, err)
		if results[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d concurrent uses of one step succeeded, want 1", n)
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
