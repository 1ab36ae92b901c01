package llm

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
)

// TestScanMatchesReference compares the C scan with the plain definition:
// the k largest logits (ties in id order) and log(sum(exp)).
func TestScanMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 40, 41, 1000, 151936} {
		logits := make([]float32, n)
		for i := range logits {
			// Coarse values make ties frequent.
			logits[i] = float32(math.Round(r.NormFloat64()*30) / 10)
		}
		s := newSampler(0, 1, 1)
		tok, lp := s.sample(logits)

		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
		k := min(topK, n)
		var sum float64
		for _, l := range logits {
			sum += math.Exp(float64(l - logits[ids[0]]))
		}
		logZ := float64(logits[ids[0]]) + math.Log(sum)
		got := make([]int, k)
		for i := range got {
			got[i] = int(s.ids[i])
		}
		if d := cmp.Diff(ids[:k], got); d != "" {
			t.Errorf("n=%d: top-k ids (-want +got):\n%s", n, d)
		}
		if tok != ids[0] || math.Abs(lp-(float64(logits[tok])-logZ)) > 1e-5 {
			t.Errorf("n=%d: greedy token %d log-probability %v, want %d and %v", n, tok, lp, ids[0], float64(logits[ids[0]])-logZ)
		}
	}
}

// TestCandidateStopsAtNewline: a reply ends at the end of its line; the part
// of the token before the newline is kept, the rest is not.
func TestCandidateStopsAtNewline(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8})
	nl := -1
	for id := 0; id < e.model.NumVocab() && nl < 0; id++ {
		if string(e.vocab.piece(id)) == "\n" {
			nl = id
		}
	}
	words, err := e.model.Tokenize("Yes please", false, false)
	if err != nil || nl < 0 {
		t.Fatal(nl, err)
	}
	c := &cand{}
	for _, w := range words {
		c.accept(e, w, -1)
	}
	if c.done {
		t.Fatal("the candidate ended before its newline")
	}
	c.accept(e, nl, -1)
	if !c.done || cleanReply(c.text) != "Yes please" || len(c.tokens) != len(words) || c.sampled != len(words)+1 {
		t.Errorf("after a newline: done %v, text %q, %d tokens, %d sampled", c.done, c.text, len(c.tokens), c.sampled)
	}

	// A generation never goes past a newline: each candidate's text is one
	// line, and its token count is what was kept.
	g := mustGenerate(t, e, request(4, 8))
	for _, c := range g.Candidates {
		if c.Length > 8 || c.Length < 1 {
			t.Errorf("candidate %q has %d tokens", c.Text, c.Length)
		}
	}
}

// TestDialogCacheKeepsSwitchedDialogs: two dialogs take turns on one engine;
// each turn reuses its own dialog's earlier prompt from the dialog cache and
// gives what a cold run gives.
func TestDialogCacheKeepsSwitchedDialogs(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8})
	a, b := request(2, 31), request(2, 32)
	a.DialogID, b.DialogID = "dialog-a", "dialog-b"
	b.Profile.Biography = "Kim is 71 and had a stroke."
	a.Messages, b.Messages = dialog(5), dialog(5)
	mustGenerate(t, e, a)
	mustGenerate(t, e, b)
	a.Messages = dialog(7)
	ga := mustGenerate(t, e, a)
	if ga.CachedTokens < ga.PromptTokens/2 {
		t.Errorf("dialog a after dialog b reused %d of %d tokens", ga.CachedTokens, ga.PromptTokens)
	}
	if _, ok := e.dialogs.entries["dialog-b"]; !ok {
		t.Error("dialog b was not saved when a took the context")
	}
	cold := a
	cold.DialogID = ""
	if d := cmp.Diff(texts(mustGenerate(t, openDemo(t, Options{MaxReplyTokens: 8}), cold)), texts(ga)); d != "" {
		t.Errorf("a restored dialog gives other candidates than a cold run (-cold +restored):\n%s", d)
	}
}

// TestPrefillLeavesOnlyTheTranscript: Prefill evaluates the turns before the
// partner's recorded turn; Generate with the transcript then reuses all of
// them, and gives what a cold run gives.
func TestPrefillLeavesOnlyTheTranscript(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8})
	full := request(3, 41)
	full.DialogID = "prefilled"
	full.Messages = dialog(7)
	full.TranscriptReserve = 64
	head := full
	head.Messages = full.Messages[:6]
	e.Prefill(context.Background(), head)
	headTokens, err := e.headTokens(head)
	if err != nil {
		t.Fatal(err)
	}
	g := mustGenerate(t, e, full)
	if g.CachedTokens != len(headTokens) {
		t.Errorf("after Prefill the request reused %d tokens, want the head's %d (prompt %d)", g.CachedTokens, len(headTokens), g.PromptTokens)
	}
	cold := full
	cold.DialogID = ""
	if d := cmp.Diff(texts(mustGenerate(t, openDemo(t, Options{MaxReplyTokens: 8}), cold)), texts(g)); d != "" {
		t.Errorf("a prefilled request gives other candidates than a cold run (-cold +prefilled):\n%s", d)
	}
	// A trailing speaker message joins the transcript's turn: it is not
	// part of the head.
	withTrailing := head
	withTrailing.Messages = append(slices.Clone(head.Messages), engine.Message{Role: engine.RoleSpeaker, Content: "Also:"})
	if tt, err := e.headTokens(withTrailing); err != nil || !slices.Equal(tt, headTokens) {
		t.Errorf("a trailing speaker message changed the head (%d tokens, want %d, err %v)", len(tt), len(headTokens), err)
	}
}

// TestTranscriptReserveKeepsEvaluatedTurns: in a context too small for the
// whole dialog, Prefill fits the earlier turns leaving TranscriptReserve
// tokens; a transcript within the reserve then drops no turn that Prefill
// evaluated, while without the reserve fitting would keep more turns than
// Prefill did and the prefilled prompt would not match.
func TestTranscriptReserveKeepsEvaluatedTurns(t *testing.T) {
	const ctxPerSeq, replyTokens, reserve = 200, 8, 40
	e := openDemo(t, Options{ContextPerSeq: ctxPerSeq, MaxReplyTokens: replyTokens})
	full := request(2, 5)
	full.DialogID = "tight"
	full.Messages = dialog(11)
	full.Messages[10].Content = "Music?" // a short transcript, well within the reserve
	full.TranscriptReserve = reserve
	head := full
	head.Messages = full.Messages[:10]
	headTokens, err := e.headTokens(head)
	if err != nil {
		t.Fatal(err)
	}
	if len(headTokens)+reserve > e.budget() {
		t.Fatalf("the head (%d tokens) leaves no reserve", len(headTokens))
	}
	all, err := e.render(chatFor(systemMessage(full), dialogTurns(full.Messages[:10])), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all)+reserve <= e.budget() {
		t.Fatalf("the whole dialog (%d tokens) fits: the test needs a longer one", len(all))
	}
	e.Prefill(context.Background(), head)
	g := mustGenerate(t, e, full)
	if g.CachedTokens != len(headTokens) || g.PromptTokens > e.budget() {
		t.Errorf("reused %d tokens of a %d-token prompt, want the prefilled %d", g.CachedTokens, g.PromptTokens, len(headTokens))
	}
	noReserve := full
	noReserve.TranscriptReserve = 0
	tokens, err := e.promptTokens(noReserve, &engine.Generation{})
	if err != nil {
		t.Fatal(err)
	}
	if commonPrefix(tokens, headTokens) == len(headTokens) {
		t.Error("without the reserve the prompt still starts with the prefilled head: the test shows nothing")
	}
}

// TestDecodingChoice: forced choices give the same candidates (in the order
// each completed them, which differs); auto timing
// records a step cost for every batch size and batches exactly where a batch
// step is cheaper than its single steps.
func TestDecodingChoice(t *testing.T) {
	var got [][]string
	for _, d := range []Decoding{DecodeBatched, DecodeSequential, DecodeAuto} {
		e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 4, Decoding: d})
		tx := texts(mustGenerate(t, e, request(3, 17)))
		slices.Sort(tx)
		got = append(got, tx)
		switch d {
		case DecodeBatched, DecodeSequential:
			for n := 1; n <= 4; n++ {
				if e.batched[n] != (d == DecodeBatched) {
					t.Errorf("%v: batched[%d] = %v", d, n, e.batched[n])
				}
			}
		case DecodeAuto:
			for n := 1; n <= 4; n++ {
				if e.stepCost[n] <= 0 || e.batched[n] != (e.stepCost[n] < time.Duration(n)*e.stepCost[1]) {
					t.Errorf("auto: n=%d cost %v (1: %v), batched %v", n, e.stepCost[n], e.stepCost[1], e.batched[n])
				}
			}
		}
	}
	if d := cmp.Diff(got[0], got[1]); d != "" {
		t.Errorf("batched and sequential decoding differ (-batched +sequential):\n%s", d)
	}
	for _, s := range []string{"auto", "batched", "sequential"} {
		if d, err := ParseDecoding(s); err != nil || d.String() != s {
			t.Errorf("ParseDecoding(%q) = %v, %v", s, d, err)
		}
	}
	if _, err := ParseDecoding("fast"); err == nil {
		t.Error("ParseDecoding accepted fast")
	}
}

// TestDecodesWithinTheCPUBudget: a decode runs as many threads as the budget
// grants, and waits while another engine holds every core.
func TestDecodesWithinTheCPUBudget(t *testing.T) {
	cpu := engine.NewCores(2)
	e := openDemo(t, Options{MaxReplyTokens: 4, Threads: 2, CPU: cpu, Decoding: DecodeBatched})
	held, err := cpu.Acquire(context.Background(), 1, 1)
	if err != nil || held != 1 {
		t.Fatal(held, err)
	}
	mustGenerate(t, e, request(2, 1))
	if e.lctx.threads != 1 {
		t.Errorf("with one core free the decodes ran %d threads", e.lctx.threads)
	}
	cpu.Release(held)
	mustGenerate(t, e, request(2, 1))
	if e.lctx.threads != 2 {
		t.Errorf("with both cores free the decodes ran %d threads", e.lctx.threads)
	}

	all, _ := cpu.Acquire(context.Background(), 2, 2)
	started := make(chan struct{})
	done := make(chan error, 1)
	e.stepHook = func(int) {
		select {
		case <-started:
		default:
			close(started)
		}
	}
	go func() { _, err := e.Generate(context.Background(), request(2, 1)); done <- err }()
	<-started
	select {
	case err := <-done:
		t.Fatalf("the request finished while every core was held elsewhere (%v)", err)
	default:
	}
	if cpu.Free() != 0 {
		t.Fatalf("free cores %d", cpu.Free())
	}
	cpu.Release(all)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cpu.Free() != 2 {
		t.Errorf("the engine kept %d cores", 2-cpu.Free())
	}
}

// TestJobKeepsItsCores: a request's decodes keep their cores from the first
// to the last, so a transcription that asks for every core meanwhile waits
// for the end of the request instead of cutting in between two decodes
// (and the next transcription between the next two).
func TestJobKeepsItsCores(t *testing.T) {
	cpu := engine.NewCores(2)
	e := openDemo(t, Options{MaxReplyTokens: 8, Threads: 2, CPU: cpu, Decoding: DecodeSequential})
	var granted atomic.Bool
	steps := 0
	e.stepHook = func(step int) {
		steps = step + 1
		if step == 2 {
			go func() {
				n, err := cpu.Acquire(context.Background(), 2, 2)
				granted.Store(err == nil)
				cpu.Release(n)
			}()
			for deadline := time.Now().Add(time.Minute); cpu.Waiting() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the transcription's Acquire did not queue")
					return
				}
			}
		}
		if step > 2 && granted.Load() {
			t.Errorf("decode %d: a transcription took the cores in the middle of the request", step)
		}
	}
	mustGenerate(t, e, request(2, 1))
	e.stepHook = nil
	if steps < 6 {
		t.Fatalf("only %d decodes: too few to tell", steps)
	}
	for deadline := time.Now().Add(time.Minute); !granted.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the transcription never got the cores after the request")
		}
	}
	// The transcription gives its cores back just after it is granted.
	for deadline := time.Now().Add(time.Minute); cpu.Free() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d cores free after both, want 2", cpu.Free())
		}
	}
}

// TestTakenReplyKeepsItsSampledTokens: a reply the engine offered that comes
// back as the AAC user's turn is in the next prompt as the tokens the model
// sampled for it (not its text tokenized again), and keeps them in every
// later turn, so each turn's prompt begins with the previous one.
func TestTakenReplyKeepsItsSampledTokens(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8})
	req := request(3, 51)
	req.DialogID = "taken"
	// Without a language note: the test counts the turns' own tokens (the
	// note after each partner turn is not part of the next turn's history).
	req.ReplyLanguage = ""
	g1 := mustGenerate(t, e, req)
	reply := g1.Candidates[0].Text
	var sampled []int
	for _, r := range e.replies.dialogs["taken"].offered {
		if r.text == reply {
			sampled = r.tokens
		}
	}
	if len(sampled) == 0 {
		t.Fatalf("the reply %q was not kept with its tokens (offered %d)", reply, len(e.replies.dialogs["taken"].offered))
	}
	next := req
	next.Messages = append(slices.Clone(req.Messages),
		engine.Message{Role: engine.RoleDisabledPerson, Content: reply},
		engine.Message{Role: engine.RoleSpeaker, Content: "And then?"})
	tokens, err := e.promptTokens(next, &engine.Generation{})
	if err != nil {
		t.Fatal(err)
	}
	if !containsRun(tokens, sampled) {
		t.Errorf("the prompt does not hold the reply's sampled tokens %v", sampled)
	}
	plain, err := e.render(chatFor(systemMessage(next), dialogTurns(next.Messages)), true)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.model.Tokenize(reply, false, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(plain) - len(again) + len(sampled); len(tokens) != want {
		t.Errorf("prompt of %d tokens, want %d (plain %d, reply %d tokens as text, %d sampled)", len(tokens), want, len(plain), len(again), len(sampled))
	}
	// The reply's cells are parked with the answer: the next turn takes
	// them over (all its tokens but the last when the cap ended it).
	evaluated := -1
	if e.parked != nil {
		for _, c := range e.parked.cands {
			if len(c.tokens) > 0 && slices.Equal(c.tokens, sampled[:len(c.tokens)]) {
				evaluated = len(c.tokens)
			}
		}
	}
	if evaluated < len(sampled)-1 {
		t.Fatalf("the reply's cells were not parked (%d of its %d tokens)", evaluated, len(sampled))
	}
	g2 := mustGenerate(t, e, next)
	if want := g1.PromptTokens + evaluated; g2.CachedTokens != want {
		t.Errorf("the second turn reused %d tokens, want the first prompt's %d and the reply's %d", g2.CachedTokens, g1.PromptTokens, evaluated)
	}
	if e.parked == nil {
		t.Error("the second answer's candidates were not parked")
	}
	// The same turns on another engine, where a request of no dialog in
	// between drops the parked cells: the reply is evaluated again, from
	// the same tokens, and the candidates are the same.
	other := openDemo(t, Options{MaxReplyTokens: 8})
	mustGenerate(t, other, req)
	mustGenerate(t, other, request(2, 7))
	if other.parked != nil || slices.ContainsFunc(other.genLen, func(n int) bool { return n != 0 }) {
		t.Error("a request of no dialog left candidate cells parked")
	}
	o2 := mustGenerate(t, other, next)
	if o2.CachedTokens != g1.PromptTokens {
		t.Errorf("without parked cells the second turn reused %d tokens, want the first prompt's %d", o2.CachedTokens, g1.PromptTokens)
	}
	if d := cmp.Diff(texts(o2), texts(g2)); d != "" {
		t.Errorf("taking over the reply's cells changed the candidates (-evaluated +taken over):\n%s", d)
	}
	third := next
	third.Messages = append(slices.Clone(next.Messages),
		engine.Message{Role: engine.RoleDisabledPerson, Content: g2.Candidates[0].Text},
		engine.Message{Role: engine.RoleSpeaker, Content: "Really?"})
	g3 := mustGenerate(t, e, third)
	if g3.CachedTokens <= g2.PromptTokens {
		t.Errorf("the third turn reused %d tokens, want more than the second prompt's %d", g3.CachedTokens, g2.PromptTokens)
	}
	// The same dialog without its ID is tokenized as text.
	cold := next
	cold.DialogID = ""
	if ct, err := e.promptTokens(cold, &engine.Generation{}); err != nil || !slices.Equal(ct, plain) {
		t.Errorf("without a dialog ID the prompt is not the plain text's tokens (err %v)", err)
	}
}

// containsRun reports whether run occurs in s as consecutive elements.
func containsRun(s, run []int) bool {
	for i := 0; i+len(run) <= len(s); i++ {
		if slices.Equal(s[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
