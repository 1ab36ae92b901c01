package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// Ticket returns a live ticket of key hash keyHash, created at T0 and valid
// for ttl.
func Ticket(hash, keyHash string, ttl time.Duration) store.LiveTicket {
	return store.LiveTicket{Hash: hash, KeyHash: keyHash, CreatedAt: T0, ExpiresAt: T0.Add(ttl)}
}

func liveTicketLifecycle(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreateLiveTicket(Ticket("t1", "k1", time.Minute), T0))
	Must(t, s.CreateLiveTicket(Ticket("t2", "k2", time.Minute), T0))
	wantErr(t, "a taken hash", s.CreateLiveTicket(Ticket("t1", "k9", time.Minute), T0), store.ErrExists)

	got, err := s.TakeLiveTicket("t1", T0.Add(59*time.Second))
	Must(t, err)
	if got.Hash != "t1" || got.KeyHash != "k1" || !got.CreatedAt.Equal(T0) || !got.ExpiresAt.Equal(T0.Add(time.Minute)) {
		t.Errorf("TakeLiveTicket = %+v", got)
	}
	// Single use: the second take finds nothing.
	_, err = s.TakeLiveTicket("t1", T0.Add(59*time.Second))
	wantErr(t, "a ticket taken twice", err, store.ErrNotFound)
	_, err = s.TakeLiveTicket("never", T0)
	wantErr(t, "an unknown ticket", err, store.ErrNotFound)
	_, err = s.TakeLiveTicket("", T0)
	wantErr(t, "an empty hash", err, store.ErrNotFound)
	// Expired at ExpiresAt exactly, and deleted by the try.
	_, err = s.TakeLiveTicket("t2", T0.Add(time.Minute))
	wantErr(t, "an expired ticket", err, store.ErrExpired)
	_, err = s.TakeLiveTicket("t2", T0)
	wantErr(t, "an expired ticket taken again", err, store.ErrNotFound)
}

func liveTicketInvalid(t *testing.T, e Env) {
	s := e.S
	wantErr(t, "an empty hash", s.CreateLiveTicket(Ticket("", "k1", time.Minute), T0), store.ErrInvalid)
	wantErr(t, "an empty key hash", s.CreateLiveTicket(Ticket("t", "", time.Minute), T0), store.ErrInvalid)
	wantErr(t, "expired at creation", s.CreateLiveTicket(Ticket("t", "k1", 0), T0), store.ErrInvalid)
	// Creating a ticket prunes the expired ones: the old hash is free again.
	Must(t, s.CreateLiveTicket(Ticket("old", "k1", time.Second), T0))
	Must(t, s.CreateLiveTicket(store.LiveTicket{Hash: "new", KeyHash: "k1", CreatedAt: T0.Add(2 * time.Second), ExpiresAt: T0.Add(time.Hour)}, T0.Add(2*time.Second)))
	_, err := s.TakeLiveTicket("old", T0)
	wantErr(t, "a pruned ticket", err, store.ErrNotFound)
	Must(t, s.CreateLiveTicket(store.LiveTicket{Hash: "old", KeyHash: "k2", CreatedAt: T0.Add(2 * time.Second), ExpiresAt: T0.Add(time.Hour)}, T0.Add(2*time.Second)))
}

func liveTicketConcurrentTake(t *testing.T, e Env) {
	s := e.S
	Must(t, s.CreateLiveTicket(Ticket("race", "k1", time.Minute), T0))
	errs := concurrently(8, func(int) error {
		_, err := s.TakeLiveTicket("race", T0.Add(time.Second))
		return err
	})
	ok := oneSucceeded(t, errs, store.ErrNotFound, "concurrent take")
	if ok != 1 {
		t.Errorf("%d of 8 concurrent takes succeeded, want exactly 1", ok)
	}
}

// liveTicketShared: a ticket issued through one handle of the store is
// honoured, once, through another (another box behind the proxy). For
// bbolt, Open gives a second, separate store, so the ticket is unknown
// there: the scenario checks only what both kinds promise, that the
// ticket is not honoured twice across the two handles.
func liveTicketShared(t *testing.T, e Env) {
	a, b := e.S, e.Open()
	Must(t, a.CreateLiveTicket(Ticket("shared", "k1", time.Minute), T0))
	_, errB := b.TakeLiveTicket("shared", T0.Add(time.Second))
	_, errA := a.TakeLiveTicket("shared", T0.Add(time.Second))
	if (errA == nil) == (errB == nil) {
		t.Errorf("taken through both handles or neither: a %v, b %v", errA, errB)
	}
	for _, err := range []error{errA, errB} {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the other take: %v, want ErrNotFound", err)
		}
	}
}

func liveOffPerKey(t *testing.T, e Env) {
	s := e.S
	MustCreateKey(t, s, "k1", T0)
	MustCreateKey(t, s, "k2", T0)
	for _, k := range []string{"k1", "k2", "unknown", ""} {
		if off, err := s.LiveOff(k); err != nil || off {
			t.Errorf("LiveOff(%q) = %v, %v before any switch", k, off, err)
		}
	}
	Must(t, s.SetLiveOff("k1", true))
	Must(t, s.SetLiveOff("k1", true)) // idempotent
	wantErr(t, "an unknown key", s.SetLiveOff("unknown", true), store.ErrNotFound)
	for k, want := range map[string]bool{"k1": true, "k2": false, "unknown": false} {
		if off, err := s.LiveOff(k); err != nil || off != want {
			t.Errorf("LiveOff(%q) = %v, %v; want %v", k, off, err, want)
		}
	}
	Must(t, s.SetLiveOff("k1", false))
	if off, _ := s.LiveOff("k1"); off {
		t.Error("k1 still off after switching it on")
	}
	// A revoked key keeps its switch (it is read only for active keys).
	Must(t, s.SetLiveOff("k2", true))
	_, err := s.RevokeKey("k2", T0)
	Must(t, err)
	if off, _ := s.LiveOff("k2"); !off {
		t.Error("the switch of a revoked key was lost")
	}
}
