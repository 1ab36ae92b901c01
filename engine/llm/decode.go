package llm

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// This file is the owner goroutine's work for one job: fit and tokenize the
// prompt, bring the prompt sequence to it (reusing what the context or the
// dialog cache holds), evaluate the rest and sample the candidates.

// run is the per-job state on the owner goroutine.
type run struct {
	e     *Engine
	ctx   context.Context
	steps int
	// minThreads is the fewest cores a decode waits for (0: one).
	minThreads int
	// ahead marks work done ahead of time (Prefill): it takes only cores
	// nobody else waits for, in smaller chunks, and gives them back after
	// every decode.
	ahead bool
	// idle marks Open's timings of an Options.Idle engine: like ahead, the
	// cores are taken at the context's priority for each decode and given
	// back after it, but the chunks stay full size.
	idle bool
	// held is the cores a request's job keeps from its first decode to its
	// end (release): a job that gave its cores back between decodes would
	// wait for a whole transcription that started in between, again and
	// again, so the oldest request would finish last.
	held int
	// aborts counts decodes stopped inside llama.cpp (0 or 1).
	aborts int
	// stopAbort ends the watch that aborts a running decode when ctx is
	// done (abort.go); nil before the first decode.
	stopAbort func()
	// genSteps[k] counts the candidates' decodes of k sequences (the
	// "generated" debug line reports them; cmd/benchlatency compares the
	// generation's time with as many reference steps, StepTimes).
	genSteps []int
	// inDecode is the time spent inside llama.cpp's decode and threadSteps
	// the threads summed over the decodes: the "generated" debug line
	// reports both, so a generation slower than its decodes shows whether
	// the time went to the decodes, to fewer cores, or around them.
	inDecode    time.Duration
	threadSteps int
}

// decode runs one decode of the engine's batch unless the job was
// cancelled, on as many threads as the CPU budget grants (at least one,
// at most Options.Threads).
func (r *run) decode() error {
	if h := r.e.stepHook; h != nil {
		h(r.steps)
	}
	r.steps++
	if err := r.ctx.Err(); err != nil {
		return canceled(err)
	}
	cpu := r.e.opts.CPU
	n := r.held
	switch {
	case r.ahead || r.idle:
		// Prompt work ahead of a committed turn, or of a speculative pass
		// (engine.WithPriority), one chunk at a time.
		got, err := cpu.AcquireAt(r.ctx, engine.PriorityOf(r.ctx, engine.PriorityAhead), max(r.minThreads, 1), r.e.opts.Threads)
		if err != nil {
			return canceled(err)
		}
		defer cpu.Release(got)
		n = got
	case r.held == 0:
		// Committed, or a live turn's replies generated ahead
		// (engine.Pipeline.ReplyAhead, PrioritySpeculative).
		got, err := cpu.AcquireAt(r.ctx, engine.PriorityOf(r.ctx, engine.PriorityCommitted), max(r.minThreads, 1), r.e.opts.Threads)
		if err != nil {
			return canceled(err)
		}
		r.held, n = got, got
	case r.held < r.e.opts.Threads:
		// Cores freed since (a transcription ended) and wanted by nobody.
		r.held += cpu.TryAcquire(r.e.opts.Threads - r.held)
		n = r.held
	}
	r.e.lctx.setThreads(n)
	if r.stopAbort == nil {
		r.stopAbort = r.e.lctx.abort.on(r.ctx)
	}
	if h := r.e.decodeHook; h != nil {
		h(r.steps - 1)
	}
	t0 := time.Now()
	err := r.e.lctx.Decode(r.e.batch)
	r.inDecode += time.Since(t0)
	r.threadSteps += n
	if err != nil {
		if aborted(r.ctx, err) {
			r.aborts++
			return canceled(r.ctx.Err())
		}
		return engine.Errorf(engine.KindLLM, err, "language model decode failed")
	}
	return nil
}

// release gives back the cores the job held and ends its abort watch.
func (r *run) release() {
	r.e.opts.CPU.Release(r.held)
	r.held = 0
	if r.stopAbort != nil {
		r.stopAbort()
		r.stopAbort = nil
	}
}

// serve handles one request on the owner goroutine. A request canceled
// while it runs (the client went away, or its deadline passed) stops before
// its next decode; the log says how far it got.
func (e *Engine) serve(j *job) (gen engine.Generation, err error) {
	gen.Queue = time.Since(j.queued)
	r := &run{e: e, ctx: j.ctx}
	defer r.release()
	reqID := engine.RequestID(j.ctx)
	defer func() {
		if engine.KindOf(err) == engine.KindCanceled {
			e.log.Info("generation canceled: stopped", "request_id", reqID, "decode_steps", r.steps, "cause", context.Cause(j.ctx),
				"aborted_in_decode", r.aborts > 0, "prompt_cached_tokens", len(e.cur.tokens))
		}
	}()
	if err := j.ctx.Err(); err != nil {
		return gen, canceled(err)
	}
	e.log.Debug("generating", "request_id", reqID, "candidates", j.req.N)
	req := j.req
	n := min(max(req.N, 1), e.opts.MaxCandidates)
	temp := min(max(req.Temperature, 0), 2)
	seed := uint64(req.Seed)
	switch {
	case seed != 0:
	case e.opts.Seed != 0:
		seed = uint64(e.opts.Seed) + e.nReq.Add(1)
	default:
		seed = rand.Uint64()
	}

	start := time.Now()
	tokens, err := e.promptTokens(req, &gen)
	if err != nil {
		return gen, err
	}
	var sr *steerRun
	if req.Steer != nil {
		if sr, err = e.newSteerRun(*req.Steer); err != nil {
			return gen, err
		}
		tokens = append(tokens, sr.kept...)
		// Every candidate's cells must fit beside the prompt's.
		sr.limit = max(min(sr.limit, (e.cells-len(tokens))/e.decodeSeqs(n, sr)-1), 1)
	}
	gen.PromptTokens = len(tokens)

	var logits []float32
	if j.decoding == decodeNaive {
		// Naive decoding evaluates the prompt per candidate below.
		e.leaveCurrent()
	} else {
		reuse, err := e.prepare(req.DialogID, tokens, len(tokens)-1)
		if err != nil {
			return gen, err
		}
		gen.CachedTokens = reuse
		logits, err = e.evalPrompt(r, promptSeq, tokens, reuse, true)
		if err != nil {
			return gen, err
		}
		// Every candidate starts from these logits, some after other
		// candidates' decodes have reused llama.cpp's buffer.
		logits = slices.Clone(logits)
	}
	gen.Prompt = time.Since(start)

	start = time.Now()
	promptDecode, promptThreadSteps, promptSteps := r.inDecode, r.threadSteps, r.steps
	m := j.decoding
	k := e.decodeSeqs(n, sr) // sequences decoded in the first round
	if m == DecodeAuto {
		m = DecodeSequential
		if e.batched[k] {
			m = DecodeBatched
		}
	}
	// The candidates are sent (req.OnCandidate) as they complete, the
	// first ranked 1; those completing in the same decode step go best
	// mean log-probability first, and dedup keeps the first sent. A
	// steered request that decodes more sequences than it shows (best-of-k,
	// Options.SteerSeqFactor) holds its first round's back until all of
	// them ended: which n are the best is known only then, so its first
	// reply is sent when the round's slowest ends, the best one first.
	seen := map[string]bool{}
	var out []scored
	send := func(done []scored) {
		rankCandidates(done)
		for _, c := range uniqueCandidates(done, seen) {
			if len(out) == n {
				return
			}
			out = append(out, c)
			if req.OnCandidate != nil {
				req.OnCandidate(c.candidate(len(out)))
			}
		}
	}
	var last []*cand // the last round's candidates
	firstAlone := false
	for round := 0; round <= extraRounds && len(out) < n; round++ {
		if round > 0 {
			e.freeGen()
		}
		want := n - len(out)
		if round == 0 {
			want = k
		}
		var cands []*cand
		for i := 0; i < want; i++ {
			t := temp
			idx := round*e.opts.MaxCandidates + i
			if t == 0 && idx > 0 {
				t = diverseTemp
			}
			cands = append(cands, e.newCand(e.genSeqs[i], newSampler(t, seed, uint64(idx)), sr))
		}
		var held []scored
		finished := func(done []*cand) {
			var sc []scored
			for _, c := range done {
				if !c.failed {
					sc = append(sc, c.scored())
				}
			}
			if round == 0 && k > n {
				held = append(held, sc...)
				return
			}
			send(sc)
		}
		var err error
		switch {
		case m == DecodeBatched && round == 0 && sr == nil && len(cands) > 1 && e.firstAlone(len(cands)):
			// The first candidate (the greedy one at temperature 0, the
			// most likely reply) alone, then the others batched: it is
			// shown a whole batch's steps sooner, the last about when a
			// batch of all of them would have ended (chooseDecoding).
			firstAlone = true
			if err = e.sampleCands(r, promptSeq, len(tokens), logits, cands[:1], finished); err == nil {
				err = e.sampleCands(r, promptSeq, len(tokens), logits, cands[1:], finished)
			}
		case m == DecodeBatched:
			err = e.sampleCands(r, promptSeq, len(tokens), logits, cands, finished)
		case m == DecodeSequential:
			// Each keeps its cells: the pool has room for every candidate.
			for _, c := range cands {
				if err = e.sampleCands(r, promptSeq, len(tokens), logits, []*cand{c}, finished); err != nil {
					break
				}
			}
		case m == decodeNaive:
			for _, c := range cands {
				var l []float32
				if l, err = e.evalPrompt(r, c.seq, tokens, 0, true); err != nil {
					break
				}
				if err = e.sampleCands(r, c.seq, len(tokens), l, []*cand{c}, finished); err != nil {
					break
				}
				e.freeGen()
			}
		}
		if err != nil {
			e.freeGen()
			return gen, err
		}
		send(held)
		last = cands
		for _, c := range cands {
			gen.GenTokens += c.sampled
		}
	}
	if m != decodeNaive {
		e.park(req.DialogID, len(tokens), last)
	} else {
		e.freeGen()
	}
	gen.Generation = time.Since(start)
	gen.SteerExhausted = sr != nil && len(out) < n
	e.offerReplies(req.DialogID, out, sr != nil)
	for i, c := range out {
		gen.Candidates = append(gen.Candidates, c.candidate(i+1))
	}
	var maskMs int64 // steering: the time spent on masks, and how many
	masks := 0
	if sr != nil {
		maskMs, masks = sr.maskTime.Milliseconds(), len(sr.masks)
	}
	e.log.Debug("generated", "request_id", reqID, "decode_steps", r.steps, "dialog_cached_tokens", gen.CachedTokens, "prompt_tokens", gen.PromptTokens,
		"examples", gen.Examples, "example_tokens", gen.ExampleTokens, "gen_tokens", gen.GenTokens, "gen_steps_by_seqs", r.genSteps, "candidates", len(gen.Candidates), "decoding", m.String(), "first_alone", firstAlone,
		"prompt_ms", gen.Prompt.Milliseconds(), "generation_ms", gen.Generation.Milliseconds(),
		"prompt_decode_ms", promptDecode.Milliseconds(), "gen_decode_ms", (r.inDecode - promptDecode).Milliseconds(),
		"gen_mean_threads", meanThreads(r.threadSteps-promptThreadSteps, r.steps-promptSteps), "prompt_mean_threads", meanThreads(promptThreadSteps, promptSteps),
		"steer_masks", masks, "steer_mask_ms", maskMs)
	return gen, nil
}

// meanThreads is the threads a decode ran on, averaged over steps decodes.
func meanThreads(threadSteps, steps int) float64 {
	if steps == 0 {
		return 0
	}
	return float64(threadSteps) / float64(steps)
}

// prefill evaluates the head of a Prefill job's prompt into the prompt
// sequence.
func (e *Engine) prefill(j *job) error {
	if err := j.ctx.Err(); err != nil {
		return canceled(err)
	}
	t0 := time.Now()
	tokens, err := e.headTokens(j.req)
	if err != nil {
		if errors.Is(err, errPromptTooLong) {
			// The transcript might not fit after these turns: the whole
			// prompt is fitted when it arrives.
			return nil
		}
		return err
	}
	reuse, err := e.prepare(j.req.DialogID, tokens, len(tokens))
	if err != nil {
		return err
	}
	if reuse < len(tokens) {
		r := &run{e: e, ctx: j.ctx, ahead: true}
		defer r.release()
		if _, err := e.evalPrompt(r, promptSeq, tokens, reuse, false); err != nil {
			return err
		}
	}
	e.log.Debug("prefilled", "dialog_cached_tokens", reuse, "prompt_tokens", len(tokens),
		"ms", time.Since(t0).Milliseconds())
	return nil
}

// budget is how many prompt tokens leave room for one reply in a sequence.
func (e *Engine) budget() int { return PromptBudget(e.opts.ContextPerSeq, e.opts.MaxReplyTokens) }

// render renders msgs with the model's template and tokenizes the result,
// with the sampled tokens of the replies it offered where msgs carry them
// (see withSampled).
func (e *Engine) render(msgs []chatMessage, addAssistant bool) ([]int, error) {
	if slices.ContainsFunc(msgs, func(m chatMessage) bool { return m.tokens != nil }) {
		if tokens, ok, err := e.splice(msgs, addAssistant); ok || err != nil {
			return tokens, err
		}
	}
	text, err := applyTemplate(e.tmpl, msgs, addAssistant)
	if err != nil {
		return nil, err
	}
	return e.model.Tokenize(text, true, true)
}

// promptTokens renders the request with the model's chat template and
// tokenizes it, dropping the oldest turns until the prompt leaves room for
// a reply in one sequence, and for ExampleTokenBudget when the request has
// remembered examples. Then it adds as many of the examples as fit in that
// budget (see exampleFits), recording how many and their tokens in gen.
// When the turns that must stay do not fit beside the examples' budget, the
// prompt goes without examples rather than failing.
func (e *Engine) promptTokens(req engine.GenerateRequest, gen *engine.Generation) ([]int, error) {
	budget := e.budget()
	examples := req.Examples[:min(len(req.Examples), engine.MaxExamples)]
	if len(examples) > 0 {
		tokens, msgs, err := e.fitPrompt(req, budget-ExampleTokenBudget, gen)
		switch {
		case err == nil:
			for _, f := range exampleFits {
				if f.n > len(examples) {
					continue
				}
				with, err := e.render(withExamples(msgs, examplesNote(examples[:f.n], f.chars)), true)
				if err != nil {
					return nil, engine.Errorf(engine.KindInternal, err, "cannot render the prompt with the model's chat template")
				}
				if extra := len(with) - len(tokens); extra <= ExampleTokenBudget {
					gen.Examples, gen.ExampleTokens = f.n, extra
					return with, nil
				}
			}
			return tokens, nil
		case !errors.Is(err, errPromptTooLong):
			return nil, err
		}
		e.log.Debug("no room for remembered examples: the prompt goes without them")
	}
	tokens, _, err := e.fitPrompt(req, budget, gen)
	return tokens, err
}

// fitPrompt fits the request's dialog into budget tokens, dropping the
// oldest turns (see promptTokens), and returns its tokens and messages.
// With a TranscriptReserve, the partner's current turn counts as at least
// that long, as headTokens counts it.
//
// Before that it cuts the history to the cold-prompt target (fitHistory),
// and records in gen how many history messages the request sent and how
// many went into the prompt.
func (e *Engine) fitPrompt(req engine.GenerateRequest, budget int, gen *engine.Generation) ([]int, []chatMessage, error) {
	var tokens []int
	turns := withLanguage(e.withSampled(req.DialogID, dialogTurns(req.Messages)), req.ReplyLanguage)
	keep := lastSpeaker(turns)
	system := systemMessage(req)
	reserve := 0
	if len(req.Examples) > 0 {
		reserve = ExampleTokenBudget
	}
	cut, err := e.fitHistory(req.DialogID, system, turns, keep, budget, reserve, func(msgs []chatMessage) ([]int, error) { return e.render(msgs, true) })
	if err != nil {
		return nil, nil, promptError(err, budget)
	}
	all := turns
	turns = turns[cut:]
	if cut > 0 {
		e.log.Debug("history cut to the cold-prompt target", "dropped_turns", cut, "history_budget_tokens", e.historyBudget())
	}
	msgs, dropped, err := fitTurns(system, turns, keep-cut, func(msgs []chatMessage) (bool, error) {
		var err error
		if tokens, err = e.render(msgs, true); err != nil {
			return false, err
		}
		if req.TranscriptReserve <= 0 || len(tokens) > budget {
			return len(tokens) <= budget, nil
		}
		head, err := e.render(headOf(msgs), false)
		if err != nil {
			return false, err
		}
		return len(head)+max(req.TranscriptReserve, len(tokens)-len(head)) <= budget, nil
	})
	if err != nil {
		if errors.Is(err, errPromptTooLong) {
			return nil, nil, promptTooLong(req, len(tokens), budget, e.countTokens)
		}
		return nil, nil, promptError(err, budget)
	}
	if dropped > 0 {
		e.log.Debug("dropped oldest turns to fit the context", "dropped_turns", dropped)
	}
	gen.HistorySent, gen.HistoryUsed = historyCounts(all, keep, cut+dropped)
	return tokens, msgs, nil
}

// countTokens returns how many tokens text is (0 when it cannot be
// tokenized), for the sizes promptTooLong reports.
func (e *Engine) countTokens(text string) int {
	if strings.TrimSpace(text) == "" {
		return 0
	}
	toks, err := e.model.Tokenize(text, false, true)
	if err != nil {
		return 0
	}
	return len(toks)
}

// headTokens renders the head of a Prefill request: the system message and
// its turns without a trailing speaker turn (the transcript will join it),
// fitted so that TranscriptReserve more tokens and a reply still fit.
func (e *Engine) headTokens(req engine.GenerateRequest) ([]int, error) {
	budget := e.budget()
	turns := e.withSampled(req.DialogID, dialogTurns(req.Messages))
	if n := len(turns); n > 0 && turns[n-1].role == "user" {
		turns = turns[:n-1]
	}
	// The same cut as the request's own prompt will make, the transcript
	// counted as TranscriptReserve tokens.
	cut, err := e.fitHistory(req.DialogID, systemMessage(req), turns, len(turns), budget-max(req.TranscriptReserve, 0), max(req.TranscriptReserve, 0),
		func(msgs []chatMessage) ([]int, error) { return e.render(msgs, false) })
	if err != nil {
		return nil, promptError(err, budget)
	}
	turns = turns[cut:]
	var tokens []int
	_, _, err = fitTurns(systemMessage(req), turns, -1, func(msgs []chatMessage) (bool, error) {
		var err error
		tokens, err = e.render(msgs, false)
		return len(tokens)+req.TranscriptReserve <= budget, err
	})
	if err != nil {
		return nil, promptError(err, budget)
	}
	return tokens, nil
}

// promptError maps a failure to fit the prompt: too long, or a chat
// template that cannot be rendered (no request would succeed, so it is not
// advertised as retryable).
func promptError(err error, budget int) error {
	if errors.Is(err, errPromptTooLong) {
		return engine.Errorf(engine.KindPromptTooLong, err, "the prompt does not fit in %d tokens", budget)
	}
	return engine.Errorf(engine.KindInternal, err, "cannot render the prompt with the model's chat template")
}

// prepare makes the prompt sequence belong to dialog key and hold the
// longest prefix of tokens it can get without evaluating: what it holds now,
// or what the dialog cache kept for key. It returns how many leading tokens
// are in place, at most limit. The dialog it held before is saved to the
// dialog cache first when it has a key.
func (e *Engine) prepare(key string, tokens []int, limit int) (int, error) {
	e.adoptParked(key, tokens)
	common := commonPrefix(e.cur.tokens, tokens)
	if key != "" && key != e.cur.key {
		if ent := e.dialogs.get(key); ent != nil {
			if n := commonPrefix(ent.tokens, tokens); n > common {
				e.leaveCurrent()
				if err := e.lctx.restoreSeq(promptSeq, ent.state); err != nil {
					// Evaluate from scratch instead.
					e.log.Warn("restoring a cached dialog failed", "error", err.Error())
					e.lctx.KvCacheSeqRm(promptSeq, -1, -1)
					e.dialogs.remove(key)
				} else {
					e.cur = current{key: key, tokens: append([]int(nil), ent.tokens...), saved: true}
					common = n
				}
			}
		}
	}
	if e.cur.key != key {
		e.saveCurrent()
		e.cur.key, e.cur.saved = key, false
	}
	reuse := min(common, limit)
	if reuse < len(e.cur.tokens) {
		if !e.lctx.KvCacheSeqRm(promptSeq, reuse, -1) {
			e.lctx.KvCacheSeqRm(promptSeq, -1, -1)
			reuse = 0
		}
		e.cur.tokens = e.cur.tokens[:reuse]
		e.cur.saved = false
	}
	return reuse, nil
}

// saveCurrent stores the prompt sequence's dialog in the dialog cache unless
// it has no key or is stored already.
func (e *Engine) saveCurrent() {
	if e.cur.key == "" || e.cur.saved || len(e.cur.tokens) == 0 {
		return
	}
	state, err := e.lctx.saveSeq(promptSeq)
	if err != nil {
		e.log.Warn("saving a dialog's prompt cache failed", "error", err.Error())
		return
	}
	e.dialogs.put(e.cur.key, e.cur.tokens, state)
	e.cur.saved = true
}

// leaveCurrent saves the current dialog and empties the prompt sequence.
func (e *Engine) leaveCurrent() {
	e.adoptParked("", nil)
	e.saveCurrent()
	e.lctx.KvCacheSeqRm(promptSeq, -1, -1)
	e.cur = current{}
}

// evalPrompt makes sequence seq hold tokens, of which its first reuse
// positions are in place, and returns the logits after the last token when
// wantLogits. On cancellation the prompt sequence keeps what was evaluated.
func (e *Engine) evalPrompt(r *run, seq int, tokens []int, reuse int, wantLogits bool) ([]float32, error) {
	var logits []float32
	chunk := promptChunk
	if r.ahead {
		chunk = aheadChunk
	}
	for pos := reuse; pos < len(tokens); {
		end := min(pos+chunk, len(tokens))
		e.batch.Clear()
		for i := pos; i < end; i++ {
			e.batch.Add(tokens[i], nil, i, wantLogits && i == len(tokens)-1, seq)
		}
		if err := r.decode(); err != nil {
			return nil, err
		}
		if wantLogits && end == len(tokens) {
			logits = e.lctx.logits(end - pos - 1)
		}
		pos = end
		if seq == promptSeq {
			e.cur.tokens = append(e.cur.tokens[:0:0], tokens[:pos]...)
			e.cur.saved = false
		} else {
			e.genLen[seq-promptSeq-1] = pos
		}
	}
	if wantLogits && logits == nil {
		return nil, engine.Errorf(engine.KindLLM, nil, "the language model returned no logits")
	}
	return logits, nil
}

// cand is one candidate being sampled.
type cand struct {
	seq     int
	s       *sampler
	tokens  []int
	text    []byte
	logprob float64
	sampled int
	done    bool
	// cut: the last token's piece went on past the newline that ended the
	// reply, so the tokens hold more than text.
	cut bool
	// limit is the most tokens the candidate samples (0: MaxReplyTokens).
	limit int
	// sr is the request's constraint (nil when not steered), st where the
	// candidate stands in it; failed: it cannot meet it (see steerAccept).
	sr     *steerRun
	st     steer.State
	failed bool
}

// newCand makes a candidate on sequence seq. A steered one's text begins
// with the forced tokens the prompt ends with.
func (e *Engine) newCand(seq int, s *sampler, sr *steerRun) *cand {
	c := &cand{seq: seq, s: s, limit: e.opts.MaxReplyTokens}
	if sr != nil {
		c.sr, c.st, c.limit = sr, sr.start, sr.limit
		c.text = slices.Clone(sr.keptText)
	}
	return c
}

// replyTokens are the reply's tokens: the forced ones of a steered request
// and the sampled ones.
func (c *cand) replyTokens() []int {
	if c.sr == nil || len(c.sr.kept) == 0 {
		return c.tokens
	}
	return append(slices.Clone(c.sr.kept), c.tokens...)
}

// accept takes a sampled token: a stop token or a newline ends the reply
// (the instruction asks for one line), the token cap ends it after the
// token.
func (c *cand) accept(e *Engine, tok int, lp float64) {
	c.sampled++
	if e.vocab.isStop(tok) {
		c.done = true
		if c.sr != nil {
			c.steerAccept(nil, true)
		}
		return
	}
	p := e.vocab.piece(tok)
	if c.sr != nil {
		defer c.steerAccept(p, false)
	}
	if i := strings.IndexByte(string(p), '\n'); i >= 0 {
		c.text = append(c.text, p[:i]...)
		if i > 0 {
			c.tokens = append(c.tokens, tok)
			c.logprob += lp
			c.cut = true
		}
		c.done = true
		return
	}
	c.text = append(c.text, p...)
	c.tokens = append(c.tokens, tok)
	c.logprob += lp
	limit := c.limit
	if limit == 0 {
		limit = e.opts.MaxReplyTokens
	}
	if len(c.tokens) >= limit {
		c.done = true
	}
}

// step samples and accepts c's next token; a steered candidate that its
// constraint leaves no token ends, failed.
func (c *cand) step(e *Engine, logits []float32) {
	tok, lp, ok := c.next(logits)
	if !ok {
		c.done, c.failed = true, true
		return
	}
	c.accept(e, tok, lp)
}

// sampleCands shares the cells of sequence from (the prompt) with each
// candidate's sequence and samples them all, one batched decode per step, starting from
// the logits after the prompt. The logits slice may be llama.cpp's own
// buffer: the first tokens are sampled before any decode. After each
// step, finished gets the candidates that step ended, in cands' order.
func (e *Engine) sampleCands(r *run, from, promptLen int, logits []float32, cands []*cand, finished func([]*cand)) error {
	var ended []*cand
	for _, c := range cands {
		if c.seq != from {
			// Unified KV cache: the copy tags the prompt's cells.
			e.lctx.KvCacheSeqCp(from, c.seq, -1, -1)
		}
		e.genLen[c.seq-1] = promptLen
		c.step(e, logits)
		if c.done {
			ended = append(ended, c)
		}
	}
	if len(ended) > 0 {
		finished(ended)
	}
	for pos := promptLen; ; pos++ {
		e.batch.Clear()
		var active []*cand
		for _, c := range cands {
			if !c.done {
				e.batch.Add(c.tokens[len(c.tokens)-1], nil, pos, true, c.seq)
				e.genLen[c.seq-1] = pos + 1
				active = append(active, c)
			}
		}
		if len(active) == 0 {
			return nil
		}
		if k := len(active); k >= len(r.genSteps) {
			r.genSteps = append(r.genSteps, make([]int, k+1-len(r.genSteps))...)
		}
		r.genSteps[len(active)]++
		if err := r.decode(); err != nil {
			return err
		}
		ended = ended[:0]
		for i, c := range active {
			c.step(e, e.lctx.logits(i))
			if c.done {
				ended = append(ended, c)
			}
		}
		if len(ended) > 0 {
			finished(ended)
		}
	}
}

// freeGen empties every candidate sequence that holds positions.
func (e *Engine) freeGen() {
	for i, n := range e.genLen {
		if n > 0 {
			e.lctx.KvCacheSeqRm(e.genSeqs[i], -1, -1)
			e.genLen[i] = 0
		}
	}
}

// chooseDecoding decides, for every number of candidates, whether to sample
// them batched or one after another. With DecodeAuto it times decode steps
// of 1 to MaxCandidates sequences over a prompt of typical length, five
// rounds alternating the sizes, keeping each size's fastest, and batches n candidates when a step of n
// costs less than n steps of one. Where batching saves little compute (a
// large model on few cores), a batch of n costs about n single steps and
// sequential decoding also lets the first candidates' early stops cut the
// rest short.
func (e *Engine) chooseDecoding() {
	n := e.opts.MaxCandidates
	e.batched = make([]bool, n+1)
	switch e.opts.Decoding {
	case DecodeBatched:
		for i := range e.batched {
			e.batched[i] = true
		}
		return
	case DecodeSequential:
		return
	}
	t0 := time.Now()
	cost, err := e.timeSteps()
	if err != nil {
		e.log.Warn("timing the decoding failed; decoding batched", "error", err.Error())
		for i := range e.batched {
			e.batched[i] = true
		}
		return
	}
	e.stepCost = cost
	e.aloneFirst = make([]bool, n+1)
	var batchedFor, seqFor, aloneFor []int
	steps := make([]int64, 0, n)
	for k := 1; k <= n; k++ {
		e.batched[k] = cost[k] < time.Duration(k)*cost[1]
		if e.batched[k] {
			batchedFor = append(batchedFor, k)
		} else {
			seqFor = append(seqFor, k)
		}
		if k > 1 && e.batched[k] && firstAloneCheaper(cost, k) {
			e.aloneFirst[k] = true
			aloneFor = append(aloneFor, k)
		}
		steps = append(steps, cost[k].Microseconds())
	}
	e.log.Info("decoding chosen", "batched_for_n", batchedFor, "sequential_for_n", seqFor, "first_alone_for_n", aloneFor,
		"step_us_by_seqs", steps, "threads", e.opts.Threads, "timing_ms", time.Since(t0).Milliseconds())
}

// firstAloneSlack is how much later than one batch of all the candidates
// the last of them may end when the first is decoded alone before the
// others (issue 42's bound: 1.05x).
const firstAloneSlack = 1.05

// firstAloneCheaper reports whether, by the measured step costs, decoding
// the first of k candidates alone and then the other k-1 batched ends the
// last within firstAloneSlack of one batch of k: a step of one plus a step
// of k-1 against a step of k, the replies being about as long. When it
// holds, the first reply comes a whole reply's steps sooner at (nearly) no
// cost to the last; when a batch step of k costs much less than a single
// step plus a step of k-1 (a step bound by reading the weights), one batch
// is kept, and its replies are sent as they end, most likely first among
// those ending together.
func firstAloneCheaper(cost []time.Duration, k int) bool {
	return float64(cost[1]+cost[k-1]) <= firstAloneSlack*float64(cost[k])
}

// firstAlone reports whether a batched round of k candidates decodes the
// first alone (chooseDecoding).
func (e *Engine) firstAlone(k int) bool { return k < len(e.aloneFirst) && e.aloneFirst[k] }

// timeSteps returns the cost of a decode step of k sequences for k in
// 1..MaxCandidates (index k), over a prompt of about 200 tokens: the least
// of five rounds for 1 to 4 sequences and for MaxCandidates, the sizes in
// between interpolated linearly.
func (e *Engine) timeSteps() ([]time.Duration, error) {
	const rounds = 5
	n := e.opts.MaxCandidates
	var sizes []int
	for k := 1; k <= n; k++ {
		if k <= 4 || k == n {
			sizes = append(sizes, k)
		}
	}
	req := engine.GenerateRequest{
		SystemPrompt:  defaultSystemPrompt,
		Profile:       engine.Profile{Biography: "Sam, 34, former teacher, lives at home with ALS.", Persona: "dry humour, brief"},
		ReplyLanguage: "en",
		Messages: []engine.Message{
			{Role: engine.RoleSpeaker, Content: "Good morning! Did you sleep well?"},
			{Role: engine.RoleDisabledPerson, Content: "Yes thanks."},
			{Role: engine.RoleSpeaker, Content: "Would you like some tea or coffee before the physio comes at ten?"},
		},
	}
	tokens, err := e.promptTokens(req, &engine.Generation{})
	if err != nil {
		return nil, err
	}
	r := e.loadRun()
	defer r.release()
	e.leaveCurrent()
	if _, err := e.evalPrompt(r, promptSeq, tokens, 0, true); err != nil {
		return nil, err
	}
	defer e.leaveCurrent()
	pos := len(tokens)
	for _, s := range e.genSeqs {
		e.lctx.KvCacheSeqCp(promptSeq, s, -1, -1)
	}
	defer func() {
		for _, s := range e.genSeqs {
			e.lctx.KvCacheSeqRm(s, -1, -1)
		}
	}()
	samples := make([][]time.Duration, n+1)
	for round := 0; round < rounds; round++ {
		for _, k := range sizes {
			e.batch.Clear()
			for i := 0; i < k; i++ {
				e.batch.Add(tokens[len(tokens)-1-i], nil, pos, true, e.genSeqs[i])
			}
			t := time.Now()
			if err := r.decode(); err != nil {
				return nil, err
			}
			samples[k] = append(samples[k], time.Since(t))
			for i := 0; i < k; i++ {
				e.lctx.KvCacheSeqRm(e.genSeqs[i], pos, -1)
			}
		}
	}
	// The least of the rounds: other processes only ever add time.
	cost := make([]time.Duration, n+1)
	for _, k := range sizes {
		cost[k] = slices.Min(samples[k])
	}
	for i := 1; i < len(sizes); i++ {
		a, b := sizes[i-1], sizes[i]
		for k := a + 1; k < b; k++ {
			cost[k] = cost[a] + (cost[b]-cost[a])*time.Duration(k-a)/time.Duration(b-a)
		}
	}
	return cost, nil
}
