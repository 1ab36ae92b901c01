// Package llm generates candidate replies with llama.cpp running in-process
// (through github.com/ollama/ollama/llama). One goroutine owns the llama.cpp
// context; requests wait in a bounded queue. A request's prompt is evaluated
// once into a dialog sequence, whose KV cache is copied to one sequence per
// candidate, and all candidates are sampled together, one batched decode per
// step. The dialog sequence stays cached per dialog_id, so the next turn of
// the same dialog only evaluates the tokens it adds.
package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"

	"github.com/replyd/replyd/engine"
)

// DefaultThreads is Options.Threads when zero: cores-1, at least 1, so one
// core stays free for the HTTP server and speech-to-text.
func DefaultThreads() int { return max(runtime.NumCPU()-1, 1) }

// Defaults applied by Open to zero Options fields.
const (
	DefaultContextPerSeq  = 4096
	DefaultQueueSize      = 16
	DefaultMaxReplyTokens = 48
	DefaultMaxCandidates  = 8
	DefaultPrefixCacheMiB = 256
)

const (
	// promptChunk is how many prompt tokens one decode call evaluates; a
	// cancelled request is noticed between chunks.
	promptChunk = 256
	// extraRounds bounds how often more candidates are sampled when
	// duplicates or empty replies leave fewer than asked.
	extraRounds = 2
	// maxDialogSlots bounds the dialog prefix cache whatever its memory.
	maxDialogSlots = 32
)

// Options configures Open. Zero values take the documented defaults.
//
// Memory: llama.cpp allocates the KV cache of every sequence up front, each
// ContextPerSeq tokens long. There are MaxCandidates candidate sequences plus
// the dialog prefix cache, which gets PrefixCacheMiB divided by one
// sequence's KV size (at least 1, at most 32 dialogs). For Qwen2.5-0.5B at
// 4096 tokens a sequence takes 48 MiB.
type Options struct {
	ModelPath      string
	ContextPerSeq  int    // tokens per sequence, default 4096
	Threads        int    // default DefaultThreads()
	GPULayers      int    // -1 = all layers when a GPU backend is present; 0 on CPU
	Seed           uint32 // base seed; 0 = random per request unless the request has a seed
	QueueSize      int    // default 16
	MaxReplyTokens int    // default 48
	MaxCandidates  int    // upper bound of N, default 8
	PrefixCacheMiB int    // bound on the dialog prefix cache memory, default 256
	Demo           bool   // the model is a generated demo model (reported in Status)
	Logger         *slog.Logger
}

// mode selects how candidates are generated. Production uses modeBatched;
// the others exist so benchmarks can measure what sharing and batching save.
type mode int

const (
	modeBatched mode = iota // prompt once, KV copied, all candidates in one decode per step
	modeShared              // prompt once, KV copied, candidates generated one after another
	modeNaive               // prompt evaluated again for every candidate, one after another
)

// Engine generates candidate replies. It implements engine.Generator and
// engine.StatusReporter and is safe for concurrent use.
type Engine struct {
	opts Options
	log  *slog.Logger

	model   *llama.Model
	lctx    *llama.Context
	vocab   vocabRef
	nVocab  int
	tmpl    string
	info    ggufInfo
	backend string
	loaded  time.Time
	batch   *llama.Batch

	genSeqs []int // one sequence per candidate
	// genLen is the number of KV positions each candidate sequence holds;
	// the owner goroutine zeroes it when it frees the sequence.
	genLen []int
	cache  *prefixCache
	nReq   atomic.Uint64

	// stepHook, when set (tests), runs on the owner goroutine before every
	// decode of a request with the decode's ordinal number.
	stepHook func(step int)

	mu      sync.Mutex
	pending []*job
	running bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

type job struct {
	ctx    context.Context
	req    engine.GenerateRequest
	mode   mode
	queued time.Time
	res    chan jobResult
}

type jobResult struct {
	gen engine.Generation
	err error
}

var backendOnce sync.Once

// Open loads the model (memory-mapped), creates the llama.cpp context,
// evaluates a short warm-up decode and starts the goroutine that owns the
// context. A file that cannot be loaded gives a *engine.Error of KindLLM
// naming the file and the reason. The context lives until the process exits:
// llama.cpp's Go binding has no call to free it.
func Open(opts Options) (*Engine, error) {
	if opts.ContextPerSeq <= 0 {
		opts.ContextPerSeq = DefaultContextPerSeq
	}
	if opts.Threads <= 0 {
		opts.Threads = DefaultThreads()
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.MaxReplyTokens <= 0 {
		opts.MaxReplyTokens = DefaultMaxReplyTokens
	}
	if opts.MaxCandidates <= 0 {
		opts.MaxCandidates = DefaultMaxCandidates
	}
	if opts.PrefixCacheMiB <= 0 {
		opts.PrefixCacheMiB = DefaultPrefixCacheMiB
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "llm")
	cLog.logger.Store(opts.Logger)
	path := opts.ModelPath
	// The error reads "cannot load language model PATH: REASON".
	fail := func(reason string) (*Engine, error) {
		return nil, engine.Errorf(engine.KindLLM, errors.New(reason), "cannot load language model %s", path)
	}
	if path == "" {
		return fail("no model path configured")
	}
	if st, err := os.Stat(path); err != nil {
		return fail(strings.TrimPrefix(err.Error(), "stat "+path+": "))
	} else if st.IsDir() {
		return fail("is a directory")
	}
	info, err := readGGUFInfo(path)
	if err != nil {
		return fail(err.Error())
	}
	if opts.ContextPerSeq <= opts.MaxReplyTokens+16 {
		return fail(fmt.Sprintf("context per sequence %d leaves no room for a prompt", opts.ContextPerSeq))
	}

	backendOnce.Do(llama.BackendInit)
	gpus := llama.EnumerateGPUs()
	ngl := opts.GPULayers
	if ngl < 0 {
		ngl = 0
		if len(gpus) > 0 {
			ngl = 9999
		}
	}
	backend := "cpu"
	if ngl > 0 && len(gpus) > 0 {
		backend = strings.ToLower(gpus[0].Library)
	}
	takeLastCError()
	model, err := llama.LoadModelFromFile(path, llama.ModelParams{NumGpuLayers: ngl, UseMmap: true})
	if err != nil {
		reason := takeLastCError()
		if reason == "" {
			reason = err.Error()
		}
		return fail(reason)
	}

	// The KV cache is split per sequence: candidates get MaxCandidates
	// sequences, the dialog prefix cache as many as its memory bound allows.
	perSeq := opts.ContextPerSeq * info.kvBytesPerToken()
	dialogs := min(max(opts.PrefixCacheMiB<<20/max(perSeq, 1), 1), maxDialogSlots)
	nSeq := opts.MaxCandidates + dialogs
	cp := llama.NewContextParams(opts.ContextPerSeq*nSeq, 512, nSeq, opts.Threads, ml.FlashAttentionAuto, "")
	lctx, err := llama.NewContextWithModel(model, cp)
	if err != nil {
		reason := takeLastCError()
		llama.FreeModel(model)
		if reason == "" {
			reason = "llama.cpp could not create a context"
		}
		return fail(reason)
	}
	batch, err := llama.NewBatch(512, 1, 0)
	if err != nil {
		// The context cannot be freed; it is small when this fails.
		return fail("cannot allocate a batch")
	}
	e := &Engine{
		opts: opts, log: log, model: model, lctx: lctx, vocab: newVocabRef(model),
		nVocab: model.NumVocab(), info: info, backend: backend, batch: batch,
		cache: newPrefixCache(opts.MaxCandidates, dialogs),
		wake:  make(chan struct{}, 1), done: make(chan struct{}),
	}
	for i := 0; i < opts.MaxCandidates; i++ {
		e.genSeqs = append(e.genSeqs, i)
	}
	e.genLen = make([]int, opts.MaxCandidates)
	e.tmpl = e.chooseTemplate(info.ChatTemplate)
	if err := e.warmUp(); err != nil {
		return fail("warm-up decode failed: " + err.Error())
	}
	e.loaded = time.Now()
	log.Info("language model loaded", "model", path, "arch", info.Arch, "backend", backend,
		"gpu_layers", ngl, "threads", opts.Threads, "ctx_per_seq", opts.ContextPerSeq,
		"candidate_seqs", opts.MaxCandidates, "dialog_cache_slots", dialogs, "demo", opts.Demo)
	go e.loop()
	return e, nil
}

// chooseTemplate returns the model's own chat template when llama.cpp's
// built-in templates recognise it, and ChatML otherwise.
func (e *Engine) chooseTemplate(src string) string {
	if src != "" {
		if _, err := applyTemplate(src, []chatMessage{{Role: "user", Content: "x"}}); err == nil {
			return src
		}
		e.log.Warn("model chat template not recognised; using ChatML")
	}
	return "chatml"
}

// warmUp decodes a few tokens so the first request does not pay for
// allocating compute buffers.
func (e *Engine) warmUp() error {
	toks, err := e.model.Tokenize("Hello, how are you?", true, true)
	if err != nil {
		return err
	}
	seq := e.genSeqs[0]
	e.batch.Clear()
	for i, t := range toks {
		e.batch.Add(t, nil, i, i == len(toks)-1, seq)
	}
	err = e.lctx.Decode(e.batch)
	e.lctx.KvCacheSeqRm(seq, -1, -1)
	return err
}

// Generate returns up to req.N distinct candidate replies, best first. N is
// clamped to 1..MaxCandidates and Temperature to 0..2; temperature 0 makes
// the first candidate greedy and samples the others at 0.5 so they differ.
// A full queue returns engine.ErrOverloaded at once; a cancelled context or
// passed deadline returns a KindCanceled error, taking the request out of
// the queue or stopping its decode and freeing its sequences. After Close it
// returns KindNotReady.
func (e *Engine) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	return e.generate(ctx, req, modeBatched)
}

func (e *Engine) generate(ctx context.Context, req engine.GenerateRequest, m mode) (engine.Generation, error) {
	if err := ctx.Err(); err != nil {
		return engine.Generation{}, canceled(err)
	}
	j := &job{ctx: ctx, req: req, mode: m, queued: time.Now(), res: make(chan jobResult, 1)}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return engine.Generation{}, engine.Errorf(engine.KindNotReady, nil, "the language model is closed")
	case len(e.pending) >= e.opts.QueueSize:
		e.mu.Unlock()
		return engine.Generation{}, engine.ErrOverloaded
	}
	e.pending = append(e.pending, j)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	select {
	case r := <-j.res:
		return r.gen, r.err
	case <-ctx.Done():
		// Leave the queue if still waiting; a running request is stopped
		// by the owner, which checks the context before every decode.
		e.mu.Lock()
		for i, p := range e.pending {
			if p == j {
				e.pending = append(e.pending[:i], e.pending[i+1:]...)
				break
			}
		}
		e.mu.Unlock()
		return engine.Generation{}, canceled(ctx.Err())
	}
}

func canceled(err error) error {
	return engine.Errorf(engine.KindCanceled, err, "the request was cancelled or its deadline passed")
}

// QueueDepth returns the number of requests waiting or running.
func (e *Engine) QueueDepth() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.pending)
	if e.running {
		n++
	}
	return n
}

// Status describes the engine for /healthz and the admin page.
func (e *Engine) Status() engine.EngineStatus {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	st := engine.EngineStatus{
		Name: "llm", Model: e.opts.ModelPath, Ready: !closed, Demo: e.opts.Demo,
		Backend: e.backend, LoadedAt: e.loaded, QueueSize: e.QueueDepth(),
	}
	if closed {
		st.Error = "closed"
	}
	return st
}

// Close stops the owner goroutine after the running request and fails the
// waiting ones with KindNotReady. The model and context stay mapped until
// the process exits. Close is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return nil
	}
	e.closed = true
	waiting := e.pending
	e.pending = nil
	e.mu.Unlock()
	for _, j := range waiting {
		j.res <- jobResult{err: engine.Errorf(engine.KindNotReady, nil, "the language model is closing")}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
	<-e.done
	return nil
}

// loop is the owner goroutine: the only one that touches the llama.cpp
// context after Open.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return
		}
		if len(e.pending) == 0 {
			e.mu.Unlock()
			<-e.wake
			continue
		}
		j := e.pending[0]
		e.pending = e.pending[1:]
		e.running = true
		e.mu.Unlock()

		gen, err := e.serve(j)
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
		j.res <- jobResult{gen: gen, err: err}
	}
}

// run is the per-request state on the owner goroutine.
type run struct {
	e     *Engine
	ctx   context.Context
	steps int
}

// decode runs one decode of the engine's batch unless the request was
// cancelled.
func (r *run) decode() error {
	if h := r.e.stepHook; h != nil {
		h(r.steps)
	}
	r.steps++
	if err := r.ctx.Err(); err != nil {
		return canceled(err)
	}
	if err := r.e.lctx.Decode(r.e.batch); err != nil {
		return engine.Errorf(engine.KindLLM, err, "language model decode failed")
	}
	return nil
}

// serve handles one request on the owner goroutine. A request canceled
// while it runs (the client went away, or its deadline passed) stops before
// its next decode; the log says how far it got.
func (e *Engine) serve(j *job) (gen engine.Generation, err error) {
	gen.Queue = time.Since(j.queued)
	r := &run{e: e, ctx: j.ctx}
	reqID := engine.RequestID(j.ctx)
	defer func() {
		if engine.KindOf(err) == engine.KindCanceled {
			e.log.Info("generation canceled: stopped sampling", "request_id", reqID, "decode_steps", r.steps, "cause", context.Cause(j.ctx))
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
	gen.PromptTokens = len(tokens)

	slot, reuse := e.cache.acquire(req.DialogID, tokens)
	gen.CachedTokens = reuse
	var logits []float32
	if j.mode == modeNaive {
		// Naive mode evaluates the prompt per candidate below.
		e.cache.release(slot)
	} else {
		logits, err = e.evalPrompt(r, slot.seq, tokens, reuse)
		if err != nil {
			return gen, err
		}
	}
	gen.Prompt = time.Since(start)

	start = time.Now()
	seen := map[string]bool{}
	var out []scored
	for round := 0; round <= extraRounds && len(out) < n; round++ {
		want := n - len(out)
		var cands []*cand
		for i := 0; i < want; i++ {
			t := temp
			idx := round*e.opts.MaxCandidates + i
			if t == 0 && idx > 0 {
				t = diverseTemp
			}
			cands = append(cands, &cand{seq: e.genSeqs[i], s: newSampler(t, seed, uint64(idx))})
		}
		var err error
		switch j.mode {
		case modeBatched:
			err = e.sampleCands(r, slot.seq, len(tokens), logits, cands)
		case modeShared:
			for _, c := range cands {
				if err = e.sampleCands(r, slot.seq, len(tokens), logits, []*cand{c}); err != nil {
					break
				}
			}
		case modeNaive:
			for _, c := range cands {
				var l []float32
				if l, err = e.evalPrompt(r, c.seq, tokens, 0); err != nil {
					break
				}
				if err = e.sampleCands(r, c.seq, len(tokens), l, []*cand{c}); err != nil {
					break
				}
			}
		}
		e.freeGen()
		if err != nil {
			return gen, err
		}
		var done []scored
		for _, c := range cands {
			gen.GenTokens += c.sampled
			done = append(done, scored{text: cleanReply(c.text), tokens: len(c.tokens), logprob: c.logprob})
		}
		out = append(out, uniqueCandidates(done, seen)...)
	}
	gen.Generation = time.Since(start)
	if len(out) > n {
		out = out[:n]
	}
	rankCandidates(out)
	for i, c := range out {
		gen.Candidates = append(gen.Candidates, engine.Candidate{
			Text: c.text, Rank: i + 1, Length: c.tokens, MeanLogProb: c.mean(),
		})
	}
	e.log.Debug("generated", "request_id", reqID, "decode_steps", r.steps, "dialog_cached_tokens", gen.CachedTokens, "prompt_tokens", gen.PromptTokens,
		"examples", gen.Examples, "example_tokens", gen.ExampleTokens,
		"gen_tokens", gen.GenTokens, "candidates", len(gen.Candidates), "prompt_ms", gen.Prompt.Milliseconds(),
		"generation_ms", gen.Generation.Milliseconds())
	return gen, nil
}

// promptTokens renders the request with the model's chat template and
// tokenizes it, dropping the oldest turns until the prompt leaves room for
// a reply in one sequence (and for ExampleTokenBudget when the request has
// examples). Then it adds as many of the examples as fit in that budget
// (see exampleFits), recording how many and their tokens in gen.
func (e *Engine) promptTokens(req engine.GenerateRequest, gen *engine.Generation) ([]int, error) {
	budget := PromptBudget(e.opts.ContextPerSeq, e.opts.MaxReplyTokens)
	examples := req.Examples[:min(len(req.Examples), engine.MaxExamples)]
	if len(examples) > 0 {
		budget -= ExampleTokenBudget
	}
	tokenize := func(msgs []chatMessage) ([]int, error) {
		text, err := applyTemplate(e.tmpl, msgs)
		if err != nil {
			return nil, err
		}
		return e.model.Tokenize(text, true, true)
	}
	var tokens []int
	msgs, dropped, err := fitTurns(systemMessage(req), dialogTurns(req.Messages), func(msgs []chatMessage) (bool, error) {
		var err error
		tokens, err = tokenize(msgs)
		return err == nil && len(tokens) <= budget, err
	})
	if err != nil {
		if errors.Is(err, errPromptTooLong) {
			return nil, promptTooLong(req, len(tokens), budget, e.countTokens)
		}
		// The model's chat template cannot be rendered: no request will
		// succeed, so this is not advertised as retryable.
		return nil, engine.Errorf(engine.KindInternal, err, "cannot render the prompt with the model's chat template")
	}
	if dropped > 0 {
		e.log.Debug("dropped oldest turns to fit the context", "dropped_turns", dropped)
	}
	for _, f := range exampleFits {
		if f.n > len(examples) {
			continue
		}
		with, err := tokenize(withExamples(msgs, examplesNote(examples[:f.n], f.chars)))
		if err != nil {
			return nil, engine.Errorf(engine.KindLLM, err, "cannot render the prompt")
		}
		if extra := len(with) - len(tokens); extra <= ExampleTokenBudget {
			gen.Examples, gen.ExampleTokens = f.n, extra
			return with, nil
		}
	}
	return tokens, nil
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

// evalPrompt makes sequence seq hold tokens, keeping its first reuse
// positions, and returns the logits after the last token. On cancellation
// the dialog cache keeps what was evaluated.
func (e *Engine) evalPrompt(r *run, seq int, tokens []int, reuse int) ([]float32, error) {
	e.lctx.KvCacheSeqRm(seq, reuse, -1)
	e.cache.setTokens(seq, tokens[:reuse])
	var logits []float32
	for pos := reuse; pos < len(tokens); {
		end := min(pos+promptChunk, len(tokens))
		e.batch.Clear()
		for i := pos; i < end; i++ {
			e.batch.Add(tokens[i], nil, i, i == len(tokens)-1, seq)
		}
		if err := r.decode(); err != nil {
			return nil, err
		}
		if end == len(tokens) {
			logits = e.lctx.GetLogitsIth(end - pos - 1)
		}
		pos = end
		e.cache.setTokens(seq, tokens[:pos])
		if seq < len(e.genLen) {
			e.genLen[seq] = pos
		}
	}
	if logits == nil {
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
}

// accept takes a sampled token: a stop token or a newline ends the reply,
// the token cap ends it after the token.
func (c *cand) accept(e *Engine, tok int, lp float64) {
	c.sampled++
	if e.vocab.isStop(tok) {
		c.done = true
		return
	}
	p := e.vocab.piece(tok)
	if i := strings.IndexByte(string(p), '\n'); i >= 0 {
		c.text = append(c.text, p[:i]...)
		if i > 0 {
			c.tokens = append(c.tokens, tok)
			c.logprob += lp
		}
		c.done = true
		return
	}
	c.text = append(c.text, p...)
	c.tokens = append(c.tokens, tok)
	c.logprob += lp
	if len(c.tokens) >= e.opts.MaxReplyTokens {
		c.done = true
	}
}

// sampleCands copies the prompt sequence into each candidate's sequence and
// samples them all, one batched decode per step, starting from the logits
// after the prompt.
func (e *Engine) sampleCands(r *run, promptSeq, promptLen int, logits []float32, cands []*cand) error {
	for _, c := range cands {
		if c.seq != promptSeq {
			// Sequences live in separate KV streams: the copy spans the
			// whole range or llama.cpp asserts.
			e.lctx.KvCacheSeqCp(promptSeq, c.seq, 0, -1)
		}
		e.genLen[c.seq] = promptLen
		tok, lp := c.s.sample(logits)
		c.accept(e, tok, lp)
	}
	for pos := promptLen; ; pos++ {
		e.batch.Clear()
		var active []*cand
		for _, c := range cands {
			if !c.done {
				e.batch.Add(c.tokens[len(c.tokens)-1], nil, pos, true, c.seq)
				e.genLen[c.seq] = pos + 1
				active = append(active, c)
			}
		}
		if len(active) == 0 {
			return nil
		}
		if err := r.decode(); err != nil {
			return err
		}
		for i, c := range active {
			tok, lp := c.s.sample(e.lctx.GetLogitsIth(i))
			c.accept(e, tok, lp)
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
