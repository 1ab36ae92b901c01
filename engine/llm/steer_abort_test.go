package llm

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// TestSupersededKeystrokeFreesSteeredDecode: a steered request superseded
// by the next keystroke (the API cancels the older request of the same key
// and dialog_id, answering it 409 superseded) stops inside the generation
// step it is running, makes no other decode, and the keystroke queued
// behind it runs next on the dialog's cached prompt and meets its own
// constraint. That is the bound client.md states for a replaced request (at
// most one step of the model's computation graph, not delaying the new
// one), shown by the order of the decodes rather than by timing.
func TestSupersededKeystrokeFreesSteeredDecode(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16, MaxCandidates: 3})
	turn := request(3, 7)
	turn.DialogID = "spell"
	mustGenerate(t, e, turn) // the turn the keystrokes refine: its prompt is cached
	a, b := turn, turn
	a.Steer = &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l"}}
	b.Steer = &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}

	got := cancelAtThirdDecode(t, e, a, b, "superseded steered request", "next keystroke")
	if len(got.Candidates) == 0 {
		t.Errorf("the next keystroke got no candidate")
	}
	for _, c := range got.Candidates {
		if !steer.Matches(*b.Steer, c.Text) {
			t.Errorf("candidate %q breaks the next keystroke's constraint %v", c.Text, b.Steer.Words)
		}
	}
	if got.CachedTokens == 0 {
		t.Errorf("the next keystroke found none of the dialog's prompt cached")
	}
	if v := atomic.LoadInt32(e.lctx.abort.p); v != 0 {
		t.Errorf("abort flag left at %d", v)
	}
	t.Logf("next keystroke: queue %v, %d of %d prompt tokens cached, %d candidates", got.Queue, got.CachedTokens, got.PromptTokens, len(got.Candidates))
}

// TestSteerSeqFactor: with SteerSeqFactor 2 a steered request decodes
// twice the sequences it shows and shows the best n by mean log-probability,
// every one meeting its constraint; an unsteered request is unchanged.
func TestSteerSeqFactor(t *testing.T) {
	one := openDemo(t, Options{MaxReplyTokens: 16, MaxCandidates: 8, Seed: 5})
	two := openDemo(t, Options{MaxReplyTokens: 16, MaxCandidates: 8, Seed: 5, SteerSeqFactor: 2})
	req := request(3, 11)
	s := engine.Steer{Mode: engine.SteerWords, Words: []string{"t", "w"}}
	req.Steer = &s
	g1, g2 := mustGenerate(t, one, req), mustGenerate(t, two, req)
	if len(g2.Candidates) == 0 || len(g2.Candidates) > 3 {
		t.Fatalf("factor 2 showed %d candidates, want 1 to 3", len(g2.Candidates))
	}
	for i, c := range g2.Candidates {
		if !steer.Matches(s, c.Text) {
			t.Errorf("candidate %q breaks %v", c.Text, s.Words)
		}
		if i > 0 && c.MeanLogProb > g2.Candidates[i-1].MeanLogProb {
			t.Errorf("candidates not ranked by mean log-probability: %v", g2.Candidates)
		}
	}
	if g2.GenTokens <= g1.GenTokens {
		t.Errorf("factor 2 sampled %d tokens, factor 1 %d: want more sequences decoded", g2.GenTokens, g1.GenTokens)
	}
	// The best shown with factor 2 is at least as likely as with 1 (the
	// first sequences are the same samples).
	if len(g1.Candidates) > 0 && g2.Candidates[0].MeanLogProb < g1.Candidates[0].MeanLogProb {
		t.Errorf("best mean log-probability %v with factor 2 < %v with 1", g2.Candidates[0].MeanLogProb, g1.Candidates[0].MeanLogProb)
	}
	u := request(3, 11)
	if a, b := mustGenerate(t, one, u), mustGenerate(t, two, u); !slices.Equal(texts(a), texts(b)) {
		t.Errorf("unsteered requests differ with SteerSeqFactor: %q vs %q", texts(a), texts(b))
	}
}
