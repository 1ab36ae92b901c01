package whisper

import (
	"slices"
	"testing"
)

// Helpers of the tests that drive the compute path step by step: each
// fails tb on an error.

// mustWindow is encodeWindow.
func mustWindow(tb testing.TB, m *Model, input []float32, n int) *decState {
	tb.Helper()
	st, err := m.encodeWindow(input, n)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// mustDecode is decode.
func mustDecode(tb testing.TB, m *Model, st *decState, tokens []int) []float32 {
	tb.Helper()
	h, err := m.decode(st, tokens)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// mustLogits is logits.
func mustLogits(tb testing.TB, m *Model, hidden []float32) []float32 {
	tb.Helper()
	lg, err := m.logits(hidden)
	if err != nil {
		tb.Fatal(err)
	}
	return lg
}

// mustTextLogits is textLogits.
func mustTextLogits(tb testing.TB, m *Model, hidden []float32) []float32 {
	tb.Helper()
	lg, err := m.textLogits(hidden)
	if err != nil {
		tb.Fatal(err)
	}
	return lg
}

// mustNext is next.
func mustNext(tb testing.TB, m *Model, hidden []float32, banned []int, exact bool) pick {
	tb.Helper()
	p, err := m.next(hidden, banned, exact)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// encoded runs the encoder on n positions and returns its output, [n][d],
// from either compute path.
func encoded(tb testing.TB, m *Model, input []float32, n int) []float32 {
	tb.Helper()
	if n == 0 {
		n = m.hp.NAudioCtx
	}
	if err := m.comp.encode(input, n); err != nil {
		tb.Fatal(err)
	}
	switch p := m.comp.(type) {
	case *blasPath:
		return slices.Clone(p.out)
	case *graphPath:
		return p.output()
	}
	tb.Fatalf("unknown compute path %T", m.comp)
	return nil
}
