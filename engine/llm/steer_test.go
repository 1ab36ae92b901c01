package llm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/engine/steer/steertest"
)

// mustSteer generates n candidates of request's dialog steered by s and
// fails t when there is none.
func mustSteer(t *testing.T, e *Engine, s engine.Steer, n int, seed uint32) engine.Generation {
	t.Helper()
	req := request(n, seed)
	req.Steer = &s
	g := mustGenerate(t, e, req)
	if len(g.Candidates) == 0 {
		t.Fatal("no candidates")
	}
	return g
}

// checkSteered runs n random constraints (n/10 with -short) through e and
// checks every candidate against the oracle, and that at least 95% of the
// constraints got a candidate.
func checkSteered(t *testing.T, e *Engine, rng *rand.Rand, n int) {
	t.Helper()
	if testing.Short() {
		n /= 10
	}
	got := 0
	for i := 0; i < n; i++ {
		s, _ := steertest.Random(rng)
		req := request(3, uint32(1+i))
		req.Steer = &s
		g, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		for _, c := range g.Candidates {
			if !steer.Matches(s, c.Text) {
				t.Fatalf("constraint %+v: candidate %q breaks it", s, c.Text)
			}
		}
		if len(g.Candidates) > 0 {
			got++
		}
		if g.SteerExhausted != (len(g.Candidates) < 3) {
			t.Fatalf("%+v: %d candidates, SteerExhausted %v", s, len(g.Candidates), g.SteerExhausted)
		}
	}
	rate := float64(got) / float64(n)
	t.Logf("%d constraints, %.1f%% with a candidate", n, 100*rate)
	if rate < 0.95 {
		t.Errorf("only %.1f%% of the constraints got a candidate, want >= 95%%", 100*rate)
	}
}

// TestSteeredCandidatesMeetConstraints is the property test on the demo
// model's SentencePiece vocabulary: no candidate breaks its constraint,
// and at least 95% of the constraints get a candidate.
func TestSteeredCandidatesMeetConstraints(t *testing.T) {
	e := openDemo(t, Options{Seed: 7})
	checkSteered(t, e, rand.New(rand.NewPCG(3, 4)), 2000)
}

// TestMaskAgreesWithOracle checks the trie-walk masks against feeding
// each token's bytes through the Program, at the states random token
// sequences reach.
func TestMaskAgreesWithOracle(t *testing.T) {
	e := openDemo(t, Options{})
	checkMasks(t, e, rand.New(rand.NewPCG(5, 6)), 150)
}

func checkMasks(t *testing.T, e *Engine, rng *rand.Rand, n int) {
	t.Helper()
	sv := e.sv
	for i := 0; i < n; i++ {
		s, target := steertest.Random(rng)
		sr, err := e.newSteerRun(s)
		if err != nil {
			t.Fatal(err)
		}
		p := sr.prog
		text := steertest.Example(rng, s)
		if target != "" && rng.IntN(2) == 0 {
			text = target
		}
		if s.Mode != engine.SteerWords {
			text = strings.TrimPrefix(text, strings.TrimSpace(string(sr.keptText)))
		}
		// Walk along the text's tokens (with random detours), checking
		// the mask at each state.
		toks, err := e.model.Tokenize(text, false, false)
		if err != nil {
			t.Fatal(err)
		}
		st, left := sr.start, sr.limit
		if rng.IntN(2) == 0 {
			// Near the token cap: the masks that close the reply.
			left = min(sr.limit, len(toks)+1+rng.IntN(3))
		}
		for k := 0; k <= len(toks) && left > 0; k++ {
			first := k == 0
			m := sr.mask(st, left, first)
			closing := p.Need(st) > left-3
			for id := 0; id < sv.n; id++ {
				want := oracleAllows(sv, p, st, id, closing, left)
				if m == nil {
					// Unconstrained: every token, even one that writes nothing.
					if !want && sv.pieces[id] != nil {
						t.Fatalf("%+v at %+v: no mask but token %d %q is not allowed", s, st, id, sv.pieces[id])
					}
					continue
				}
				got := m[id>>6]&(1<<(id&63)) != 0
				if first && sr.heal != nil && got && sr.heal[id>>6]&(1<<(id&63)) == 0 {
					t.Fatalf("%+v: healing allows token %q outside the heal set", s, sv.pieces[id])
				}
				if got && !want || !got && want && !(first && sr.heal != nil) {
					t.Fatalf("%+v at %+v (left %d): token %d %q: mask %v, oracle %v", s, st, left, id, sv.pieces[id], got, want)
				}
			}
			if k == len(toks) {
				break
			}
			var ok bool
			if st, ok, _ = p.Feed(st, sv.pieces[toks[k]]); !ok {
				break
			}
			left--
		}
	}
}

// oracleAllows decides one token by feeding its bytes through p.
func oracleAllows(sv *steerVocab, p *steer.Program, st steer.State, id int, closing bool, left int) bool {
	piece := sv.pieces[id]
	if piece == nil {
		for _, s := range sv.stops {
			if int(s) == id {
				return p.CanEnd(st)
			}
		}
		return false
	}
	next, ok, end := p.Feed(st, piece)
	if end {
		return ok
	}
	if !ok || next.Partial() && !p.Unconstrained(next) {
		return false
	}
	return !closing || p.Need(next) <= left-1
}

// TestSteerHealing checks token healing on the demo vocabulary: a prefix
// ending mid-word goes into the prompt up to its last whole word, and the
// first sampled token begins with the rest.
func TestSteerHealing(t *testing.T) {
	e := openDemo(t, Options{Seed: 3})
	s := engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}
	sr, err := e.newSteerRun(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(sr.keptText)); got != "I would" {
		t.Fatalf("kept %q, want %q", got, "I would")
	}
	if sr.heal == nil {
		t.Fatal("no token begins with \" li\"")
	}
	g := mustSteer(t, e, s, 4, 9)
	for _, c := range g.Candidates {
		if !strings.HasPrefix(c.Text, "I would li") {
			t.Errorf("candidate %q does not continue %q", c.Text, s.Prefix)
		}
	}
	m := sr.mask(sr.start, sr.limit, true)
	for id, p := range e.sv.pieces {
		if m[id>>6]&(1<<(id&63)) != 0 && !bytes.HasPrefix(p, []byte(" li")) {
			t.Errorf("healing allows %q as the first token", p)
		}
	}
}

// openQwenVocab opens an engine on a small model with Qwen2.5's real
// byte-level BPE vocabulary (skipped loudly without Qwen's tokenizer.json).
func openQwenVocab(t *testing.T) *Engine {
	t.Helper()
	e, err := Open(Options{ModelPath: qwenVocabModel(t), Seed: 11, PrefixCacheMiB: 8, ContextPerSeq: 1024, MaxCandidates: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestSteerQwenVocab is the property test, the mask's agreement with the
// oracle and token healing on Qwen2.5's real vocabulary.
func TestSteerQwenVocab(t *testing.T) {
	e := openQwenVocab(t)
	t.Run("constraints", func(t *testing.T) {
		checkSteered(t, e, rand.New(rand.NewPCG(7, 8)), 1000)
	})
	t.Run("mask", func(t *testing.T) {
		checkMasks(t, e, rand.New(rand.NewPCG(9, 10)), 12)
	})
	t.Run("complete", func(t *testing.T) {
		checkComplete(t, e)
	})
	t.Run("healing", func(t *testing.T) {
		s := engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}
		sr, err := e.newSteerRun(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.model.Tokenize("I would", false, false)
		if err != nil {
			t.Fatal(err)
		}
		if string(sr.keptText) != "I would" || !slices.Equal(sr.kept, want) {
			t.Fatalf("kept %q %v, want \"I would\" %v", sr.keptText, sr.kept, want)
		}
		like, err := e.model.Tokenize(" like", false, false)
		if err != nil || len(like) != 1 {
			t.Fatalf("\" like\" is %v (%v), want one token", like, err)
		}
		m := sr.mask(sr.start, sr.limit, true)
		allowed := func(id int) bool { return m[id>>6]&(1<<(id&63)) != 0 }
		if !allowed(like[0]) {
			t.Error("healing refuses \" like\" as the first token")
		}
		n := 0
		for id, p := range e.sv.pieces {
			if allowed(id) {
				n++
				if !bytes.HasPrefix(p, []byte(" li")) {
					t.Errorf("healing allows %q as the first token", p)
				}
			}
		}
		t.Logf("%d tokens may begin the healed word", n)
		g := mustSteer(t, e, s, 4, 5)
		for _, c := range g.Candidates {
			if !strings.HasPrefix(c.Text, "I would li") || strings.HasPrefix(c.Text, "I would li ") {
				t.Errorf("candidate %q does not continue the word of %q", c.Text, s.Prefix)
			}
		}
	})
}

// TestScanMasked checks the masked scan against a plain Go one: the top
// logits among the allowed ones, and the log-sum-exp over all of them,
// also when a refused logit is far larger than every allowed one.
func TestScanMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 8, 9, 100, 1000, 151936} {
		for _, density := range []float64{0, 0.0005, 0.01, 0.5, 1} {
			logits := make([]float32, n)
			mask := make([]uint64, (n+63)/64)
			var allowed []int
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 3)
				if rng.Float64() < density {
					mask[i>>6] |= 1 << (i & 63)
					allowed = append(allowed, i)
				}
			}
			if n > 10 {
				logits[n/2] = 200 // refused (or not): the sum must not overflow
			}
			mx := float64(logits[0])
			for _, v := range logits {
				mx = math.Max(mx, float64(v))
			}
			var sum float64
			for _, v := range logits {
				sum += math.Exp(float64(v) - mx)
			}
			logZ := mx + math.Log(sum)
			slices.SortStableFunc(allowed, func(a, b int) int { return cmpFloat(logits[b], logits[a]) })
			s := newSampler(0, 1, 1)
			tok, lp, ok := s.sampleMasked(logits, mask)
			if len(allowed) == 0 {
				if ok {
					t.Errorf("n=%d: nothing allowed, but token %d", n, tok)
				}
				continue
			}
			if !ok || tok != allowed[0] || math.Abs(lp-(float64(logits[tok])-logZ)) > 1e-4*math.Max(1, math.Abs(logZ)) {
				t.Errorf("n=%d density %v: token %d lp %v ok %v, want %d lp %v", n, density, tok, lp, ok, allowed[0], float64(logits[allowed[0]])-logZ)
			}
			for i := 0; i < min(topK, len(allowed)); i++ {
				if int(s.ids[i]) != allowed[i] {
					t.Errorf("n=%d density %v: top %d is %d, want %d", n, density, i, s.ids[i], allowed[i])
					break
				}
			}
		}
	}
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestSteeredReplyKeepsItsTokens: a reply of a steered answer is offered
// with the tokens of its forced prefix and the ones sampled, so when it
// comes back as the user's turn the prompt holds exactly those tokens; the
// turn's earlier (unsteered) replies stay offered too.
func TestSteeredReplyKeepsItsTokens(t *testing.T) {
	e := openDemo(t, Options{Seed: 5})
	req := request(3, 1)
	req.DialogID = "d-steer-tokens"
	first := mustGenerate(t, e, req)
	s := engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}
	req.Steer = &s
	g := mustGenerate(t, e, req)
	if len(g.Candidates) == 0 || len(first.Candidates) == 0 {
		t.Fatal("no candidates")
	}
	kept, err := e.model.Tokenize("I would", false, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range g.Candidates {
		toks := e.replies.sampled(req.DialogID, c.Text)
		if len(toks) < len(kept) || !slices.Equal(toks[:len(kept)], kept) {
			t.Fatalf("reply %q offered with tokens %v, want them to begin with %v", c.Text, toks, kept)
		}
		var text []byte
		for _, tok := range toks {
			text = append(text, e.vocab.piece(tok)...)
		}
		if cleanReply(text) != c.Text {
			t.Errorf("reply %q offered with tokens that read %q", c.Text, text)
		}
	}
	if e.replies.sampled(req.DialogID, first.Candidates[0].Text) == nil {
		t.Errorf("the turn's own reply %q is no longer offered after steering", first.Candidates[0].Text)
	}
}

// checkComplete: a replace's candidate ends as soon as its text is
// complete (nothing but spaces may follow): its tokens reach that state
// only with the last one, so no decode goes to trailing spaces.
func checkComplete(t *testing.T, e *Engine) {
	t.Helper()
	s := engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk please", Word: 2}
	p, err := steer.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seed := uint32(1); seed <= 4; seed++ {
		req := request(4, seed)
		req.DialogID = fmt.Sprintf("d-steer-complete-%d", seed)
		req.Steer = &s
		g := mustGenerate(t, e, req)
		for _, c := range g.Candidates {
			toks := e.replies.sampled(req.DialogID, c.Text)
			if toks == nil {
				continue // not offered: cut by a newline
			}
			n++
			st := steer.State{}
			for i, tok := range toks {
				var ok bool
				if st, ok, _ = p.Feed(st, e.vocab.piece(tok)); !ok {
					t.Fatalf("candidate %q: token %d (%q) breaks %+v", c.Text, i, e.vocab.piece(tok), s)
				}
				if p.Complete(st) != (i == len(toks)-1) {
					t.Errorf("candidate %q: complete after token %d of %d (%q)", c.Text, i+1, len(toks), e.vocab.piece(tok))
					break
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no candidate offered")
	}
}

// TestSteerComplete is checkComplete on the demo model's SentencePiece
// vocabulary.
func TestSteerComplete(t *testing.T) {
	checkComplete(t, openDemo(t, Options{Seed: 3}))
}
