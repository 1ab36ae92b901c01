package llm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
)

// generateSent runs req on e and returns the generation with the candidates
// OnCandidate was called with, in order.
func generateSent(t *testing.T, e *Engine, req engine.GenerateRequest, d Decoding) (engine.Generation, []engine.Candidate) {
	t.Helper()
	var sent []engine.Candidate
	req.OnCandidate = func(c engine.Candidate) { sent = append(sent, c) }
	g, err := e.generate(context.Background(), req, d)
	if err != nil {
		t.Fatal(err)
	}
	return g, sent
}

// checkSent checks the calls of OnCandidate against the final list: the
// same candidates in the same order, ranked 1..n, at most n, no two with
// the same dedup key.
func checkSent(t *testing.T, name string, g engine.Generation, sent []engine.Candidate, n int) {
	t.Helper()
	if d := cmp.Diff(g.Candidates, sent); d != "" {
		t.Errorf("%s: OnCandidate calls differ from the final list (-final +sent):\n%s", name, d)
	}
	if len(sent) == 0 || len(sent) > n {
		t.Errorf("%s: %d candidates sent, want 1 to %d", name, len(sent), n)
	}
	seen := map[string]bool{}
	for i, c := range sent {
		if c.Rank != i+1 {
			t.Errorf("%s: call %d has rank %d", name, i+1, c.Rank)
		}
		k := dedupKey(c.Text)
		if k == "" || seen[k] {
			t.Errorf("%s: candidate %d %q is empty or a duplicate", name, i+1, c.Text)
		}
		seen[k] = true
	}
}

// TestOnCandidateOrder: every decoding sends each candidate once as it
// completes, in the order and with the ranks of the final list, never more
// than N; candidates that completed in the same decode step (those that
// reached the token cap together in a batch) go best mean log-probability
// first.
func TestOnCandidateOrder(t *testing.T) {
	const maxTokens = 8
	e := openDemo(t, Options{MaxReplyTokens: maxTokens, MaxCandidates: 4})
	for _, d := range []Decoding{DecodeBatched, DecodeSequential, decodeNaive} {
		for _, n := range []int{1, 3, 4} {
			for seed := uint32(1); seed <= 3; seed++ {
				req := request(n, seed)
				req.DialogID = "d"
				g, sent := generateSent(t, e, req, d)
				name := d.String()
				checkSent(t, name, g, sent, n)
				if d != DecodeBatched {
					continue
				}
				var prev *engine.Candidate
				for i := range sent {
					c := &sent[i]
					if c.Length != maxTokens {
						continue
					}
					if prev != nil && c.MeanLogProb > prev.MeanLogProb {
						t.Errorf("%s n=%d: %q (rank %d, mean %v) completed with %q (rank %d, mean %v) in the last step and comes after it",
							name, n, c.Text, c.Rank, c.MeanLogProb, prev.Text, prev.Rank, prev.MeanLogProb)
					}
					prev = c
				}
			}
		}
	}
}

// TestOnCandidateDedup: when duplicates leave fewer candidates than asked
// and more rounds are sampled, the calls still hold no duplicate, keep their
// order across the rounds and never exceed N. One-token replies in a small
// demo vocabulary make duplicates common; the test looks for a seed that
// needed another round.
func TestOnCandidateDedup(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 1, MaxCandidates: 4})
	const n = 4
	rounds := 0
	for seed := uint32(1); seed <= 40; seed++ {
		req := request(n, seed)
		req.Temperature = 0
		g, sent := generateSent(t, e, req, DecodeBatched)
		checkSent(t, "dedup", g, sent, n)
		if g.GenTokens > n {
			rounds++
		}
	}
	if rounds == 0 {
		t.Fatal("no seed needed another round: the test shows nothing of deduplication")
	}
	t.Logf("%d of 40 requests sampled more rounds after duplicates", rounds)
}

// TestOnCandidateSteered: a steered request that decodes twice the
// sequences it shows sends the best of its first round, by mean
// log-probability, once the round ended, and the calls equal the final list.
func TestOnCandidateSteered(t *testing.T) {
	for _, factor := range []int{1, 2} {
		e := openDemo(t, Options{MaxReplyTokens: 16, MaxCandidates: 8, Seed: 5, SteerSeqFactor: factor})
		req := request(3, 11)
		req.Steer = &engine.Steer{Mode: engine.SteerWords, Words: []string{"t", "w"}}
		g, sent := generateSent(t, e, req, DecodeAuto)
		checkSent(t, "steered", g, sent, 3)
	}
}

// TestFirstAlone: with the first candidate decoded alone before the others
// (chosen where the step costs make it cheap, firstAloneCheaper), the
// greedy candidate of a temperature-0 request is sent first, rank 1, the
// candidates are those of one batch.
func TestFirstAlone(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 4})
	req := request(4, 3)
	req.Temperature = 0
	one := req
	one.N = 1
	want := mustGenerate(t, e, one).Candidates[0].Text
	batch, _ := generateSent(t, e, req, DecodeBatched)
	e.aloneFirst = []bool{false, false, true, true, true}
	g, sent := generateSent(t, e, req, DecodeBatched)
	checkSent(t, "first alone", g, sent, 4)
	if len(sent) == 0 || sent[0].Text != want {
		t.Errorf("first sent %q, want the greedy reply %q", texts(g), want)
	}
	a, b := texts(batch), texts(g)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("first alone gave %q, one batch %q", b, a)
	}
	if !firstAloneCheaper([]time.Duration{0, 10, 19, 28, 37}, 4) || firstAloneCheaper([]time.Duration{0, 23, 46, 54, 60}, 4) {
		t.Error("firstAloneCheaper: 10+28 <= 1.05*37 holds, 23+54 <= 1.05*60 does not")
	}
}
