package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// opsBasics checks the operational methods: an open store answers Ping,
// names where its data lives, grows in Size as data is written, and either
// streams a backup or says (ErrNotSupported, nothing written) why not.
func opsBasics(t *testing.T, e Env) {
	s := e.S
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping on an open store: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping with a cancelled context succeeded")
	}
	if s.Describe() == "" {
		t.Error("Describe is empty")
	}
	before, err := s.Size()
	Must(t, err)
	for i := range 200 {
		MustAppend(t, s, store.LogEntry{Timestamp: T0.Add(time.Duration(i) * time.Millisecond), Message: string(bytes.Repeat([]byte("x"), 1000)), StreamName: store.StreamInfer})
	}
	after, err := s.Size()
	Must(t, err)
	if before <= 0 || after <= before {
		t.Errorf("Size before %d, after 200 kB of logs %d: want positive and growing", before, after)
	}

	var buf bytes.Buffer
	n, err := s.Backup(&buf)
	switch {
	case errors.Is(err, store.ErrNotSupported):
		if n != 0 || buf.Len() != 0 || err.Error() == store.ErrNotSupported.Error() {
			t.Errorf("Backup not supported: wrote %d bytes (buffer %d), error %q must explain what to do", n, buf.Len(), err)
		}
	case err != nil:
		t.Errorf("Backup: %v", err)
	default:
		if n <= 0 || n != int64(buf.Len()) {
			t.Errorf("Backup returned %d, wrote %d bytes", n, buf.Len())
		}
	}
}
