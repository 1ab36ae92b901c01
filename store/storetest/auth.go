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
	verify := func(hash string, now time.Time, want store.OTPResult) {
		t.Helper()
		got, err := s.VerifyOTP(hash, now, 3)
		Must(t, err)
		if got != want {
			t.Errorf("VerifyOTP(%q) = %v, want %v", hash, got, want)
		}
	}
	if last, err := s.LastOTPIssued(); err != nil || !last.IsZero() {
		t.Errorf("LastOTPIssued empty = %v, %v", last, err)
	}
	verify("x", T0, store.OTPNone)

	// Single use.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("bad", T0, store.OTPWrong)
	verify("good", T0, store.OTPOK)
	verify("good", T0, store.OTPNone)
	if last, _ := s.LastOTPIssued(); !last.Equal(T0) {
		t.Errorf("LastOTPIssued after use = %v, want %v", last, T0)
	}

	// Burned on the third wrong try; the right code is then useless.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("bad1", T0, store.OTPWrong)
	verify("bad2", T0, store.OTPWrong)
	verify("bad3", T0, store.OTPBurned)
	verify("good", T0, store.OTPNone)

	// The right code after maxAttempts-1 wrong tries still works.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("bad1", T0, store.OTPWrong)
	verify("bad2", T0, store.OTPWrong)
	verify("good", T0, store.OTPOK)

	// A new code resets the attempts.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("bad1", T0, store.OTPWrong)
	verify("bad2", T0, store.OTPWrong)
	Must(t, s.SaveOTP("new", T0.Add(time.Minute), exp))
	verify("good", T0, store.OTPWrong) // the replaced code no longer works
	verify("bad", T0, store.OTPWrong)
	verify("new", T0, store.OTPOK)
	if last, _ := s.LastOTPIssued(); !last.Equal(T0.Add(time.Minute)) {
		t.Errorf("LastOTPIssued = %v", last)
	}

	// Expiry is exclusive: at expiresAt the code is gone.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("good", exp, store.OTPExpired)
	verify("good", T0, store.OTPNone)
	Must(t, s.SaveOTP("good", T0, exp))
	verify("good", exp.Add(-time.Nanosecond), store.OTPOK)
	// An expired code is gone even for a wrong guess.
	Must(t, s.SaveOTP("good", T0, exp))
	verify("bad", exp.Add(time.Hour), store.OTPExpired)
	verify("good", T0, store.OTPNone)

	// maxAttempts below 1 burns on the first wrong try.
	Must(t, s.SaveOTP("good", T0, exp))
	if r, _ := s.VerifyOTP("bad", T0, 0); r != store.OTPBurned {
		t.Errorf("maxAttempts 0: %v, want OTPBurned", r)
	}
}

func otpInvalid(t *testing.T, e Env) {
	wantErr(t, "SaveOTP with empty hash", e.S.SaveOTP("", T0, T0.Add(time.Minute)), store.ErrInvalid)
	if last, _ := e.S.LastOTPIssued(); !last.IsZero() {
		t.Errorf("a rejected code counts as issued: %v", last)
	}
}

// otpConcurrentRight verifies the right code from many goroutines at once
// (on PostgreSQL: many boxes): exactly one logs in.
func otpConcurrentRight(t *testing.T, e Env) {
	Must(t, e.S.SaveOTP("good", T0, T0.Add(time.Minute)))
	results := make([]store.OTPResult, 12)
	errs := concurrently(len(results), func(i int) error {
		var err error
		results[i], err = e.S.VerifyOTP("good", T0, 5)
		return err
	})
	count := map[store.OTPResult]int{}
	for i, err := range errs {
		Must(t, err)
		count[results[i]]++
	}
	if count[store.OTPOK] != 1 || count[store.OTPNone] != len(results)-1 {
		t.Errorf("results %v: want exactly one OTPOK and the rest OTPNone", count)
	}
}

// otpConcurrentWrong sends more wrong codes at once than the lockout allows:
// two are counted wrong, one burns the code, the rest find no code, and the
// right code no longer works. The count is shared, not per caller.
func otpConcurrentWrong(t *testing.T, e Env) {
	Must(t, e.S.SaveOTP("good", T0, T0.Add(time.Minute)))
	results := make([]store.OTPResult, 10)
	errs := concurrently(len(results), func(i int) error {
		var err error
		results[i], err = e.S.VerifyOTP(fmt.Sprintf("bad%d", i), T0, 3)
		return err
	})
	count := map[store.OTPResult]int{}
	for i, err := range errs {
		Must(t, err)
		count[results[i]]++
	}
	if count[store.OTPWrong] != 2 || count[store.OTPBurned] != 1 || count[store.OTPNone] != 7 {
		t.Errorf("results %v: want 2 OTPWrong, 1 OTPBurned, 7 OTPNone", count)
	}
	if r, _ := e.S.VerifyOTP("good", T0, 3); r != store.OTPNone {
		t.Errorf("the right code after the lockout: %v, want OTPNone", r)
	}
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
