package llm

import (
	"context"
	"slices"
	"testing"
)

// TestGreedy: the greedy continuation is the argmax at every step, the same
// on a second run, leaves no cells behind, and refuses what does not fit.
func TestGreedy(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 4, ContextPerSeq: 256, MaxCandidates: 2, Decoding: DecodeBatched})
	a, err := e.Greedy(context.Background(), 30, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 8 {
		t.Fatalf("%d tokens, want 8", len(a))
	}
	for i, g := range a {
		if g.Token < 0 || g.Token >= e.model.NumVocab() || g.Margin < 0 {
			t.Errorf("token %d: %+v", i, g)
		}
	}
	b, err := e.Greedy(context.Background(), 30, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Errorf("two greedy runs differ:\n%v\n%v", a, b)
	}
	g := mustGenerate(t, e, request(2, 2))
	if g.CachedTokens != 0 {
		t.Errorf("the request after Greedy reused %d cached tokens", g.CachedTokens)
	}
	if _, err := e.Greedy(context.Background(), 1000, 4); err == nil {
		t.Error("a prompt beyond the budget was continued")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Greedy(ctx, 20, 2); err == nil {
		t.Error("a cancelled Greedy succeeded")
	}
}

func TestArgmax2(t *testing.T) {
	for _, c := range []struct {
		v            []float32
		best, second int
	}{
		{[]float32{1, 3, 2}, 1, 2},
		{[]float32{5, 1, 4}, 0, 2},
		{[]float32{-2, -1, -3, -0.5}, 3, 1},
		{[]float32{2, 2, 1}, 0, 1},
	} {
		if b, s := argmax2(c.v); b != c.best || s != c.second {
			t.Errorf("argmax2(%v) = %d, %d; want %d, %d", c.v, b, s, c.best, c.second)
		}
	}
}
