// Package llm generates candidate replies with llama.cpp running in-process
// (through github.com/ollama/ollama/llama). One goroutine owns the llama.cpp
// context; requests wait in a bounded queue. A request's prompt is evaluated
// once into the prompt sequence; every candidate sequence shares its KV
// cells (llama.cpp's unified KV cache), and the candidates are sampled
// either together, one batched decode per step, or one after another,
// whichever Open measured to be faster on this machine for that number of
// candidates. The prompt stays cached per dialog_id (in the context while
// the dialog is the current one, in Go memory otherwise), so the next turn of
// the same dialog only evaluates the tokens it adds; with Prefill, the turns
// before the partner's last one are evaluated while the recording is still
// being transcribed.
package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/llama"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/modelfile"
	"github.com/replyd/replyd/internal/cpubudget"
)

// DefaultThreads is Options.Threads when zero: the cores the process may
// use (internal/cpubudget) less one, at least 1.
func DefaultThreads() int { return max(cpubudget.Cores()-1, 1) }

// Defaults applied by Open to zero Options fields.
const (
	DefaultContextPerSeq = 4096
	// DefaultMaxReplyTokens caps one candidate. The instruction asks for "one
	// short reply of a few words" on one line, and replyd's default system
	// prompt for "at most about 15 words"; a candidate ends at its first
	// newline or end-of-turn token. 20 tokens hold about 15 English words
	// with Qwen2.5's tokenizer (1.3 tokens a word with punctuation), so the
	// cap cuts only replies that ramble past the prompt's limit, and each
	// token it saves is a decode step of every candidate.
	DefaultMaxReplyTokens = 20
	DefaultMaxCandidates  = 8
	DefaultPrefixCacheMiB = 256
)

const (
	// promptChunk is how many prompt tokens one decode call evaluates (and
	// llama.cpp's batch size); a cancelled request is noticed, and the CPU
	// budget taken again, between chunks.
	promptChunk = 512
	// aheadChunk is the chunk of a Prefill: it holds cores that a request
	// may come to want for a shorter while.
	aheadChunk = 64
	// extraRounds bounds how often more candidates are sampled when
	// duplicates or empty replies leave fewer than asked.
	extraRounds = 2
	// promptSeq is the sequence that holds the current dialog's prompt; the
	// candidates use the sequences after it.
	promptSeq = 0
)

// Decoding selects how the candidates of one request are sampled.
type Decoding int

const (
	// DecodeAuto times both ways at Open, after the warm-up, and picks
	// the faster one for each number of candidates.
	DecodeAuto Decoding = iota
	// DecodeBatched evaluates the prompt once, shared by all candidates,
	// and samples them together, one decode per step.
	DecodeBatched
	// DecodeSequential evaluates the prompt once and samples the
	// candidates one after another, each from the shared prompt.
	DecodeSequential
	// decodeNaive evaluates the prompt again for every candidate, one
	// after another: the baseline benchmarks compare with. Options and
	// ParseDecoding never give it.
	decodeNaive
)

// String returns "auto", "batched", "sequential" (or "naive").
func (d Decoding) String() string {
	switch d {
	case DecodeBatched:
		return "batched"
	case DecodeSequential:
		return "sequential"
	case decodeNaive:
		return "naive"
	default:
		return "auto"
	}
}

// ParseDecoding parses what String returns for the three Options values.
func ParseDecoding(s string) (Decoding, error) {
	for _, d := range []Decoding{DecodeAuto, DecodeBatched, DecodeSequential} {
		if s == d.String() {
			return d, nil
		}
	}
	return DecodeAuto, fmt.Errorf("decoding %q: want auto, batched or sequential", s)
}

// Options configures Open. Zero values take the documented defaults.
//
// Memory: the sequences share one pool of KV cells (llama.cpp's unified KV
// cache), sized for one prompt and the replies: ContextPerSeq plus
// MaxReplyTokens for each further candidate. For Qwen2.5-0.5B that is 12 KiB
// a cell, 50 MiB at the defaults; for Qwen2.5-1.5B 28 KiB, 117 MiB. The
// prompts of other recent dialogs are kept in Go memory, up to
// PrefixCacheMiB.
type Options struct {
	ModelPath      string
	ContextPerSeq  int    // tokens of one dialog, prompt and reply; default 4096
	Threads        int    // most threads a decode uses; default DefaultThreads()
	GPULayers      int    // -1 = all layers when a GPU backend is present; 0 on CPU
	Seed           uint32 // base seed; 0 = random per request unless the request has a seed
	MaxReplyTokens int    // default DefaultMaxReplyTokens
	MaxCandidates  int    // upper bound of N, default 8
	PrefixCacheMiB int    // bound on the memory of cached dialogs' prompts, default 256
	Decoding       Decoding
	// CPU is the budget shared with the speech engine: every decode takes
	// between 1 and Threads cores from it and runs that many threads. Nil
	// means Threads always.
	CPU *engine.Scheduler
	// ColdPromptTarget bounds the time a request's uncached prompt takes:
	// the history is cut (in blocks, see history.go) so that its uncached
	// tokens fit what the prompt speed evaluates in that time. Zero: no
	// bound but the context.
	ColdPromptTarget time.Duration
	// PromptRate is the prompt speed in tokens a second that
	// ColdPromptTarget is turned into tokens with; zero measures it once
	// in Open.
	PromptRate float64
	// Idle runs Open's timings (the decode steps of chooseDecoding and the
	// prompt speed) at engine.PrioritySpeculative, taking the cores for
	// each decode and giving them back after it, so that any request waiting
	// for cores goes first: a candidate model timed beside the active one
	// (the admin page's Time, Figures).
	Idle bool
	// SteerSeqFactor is how many sequences a steered request decodes per
	// candidate it shows (at most MaxCandidates in all), keeping the best
	// by length-normalised log-probability; 0 or 1: as many as shown
	// (docs/steering.md gives the figures of 2).
	SteerSeqFactor int
	Demo           bool // the model is a generated demo model (reported in Status)
	Logger         *slog.Logger
}

// Engine generates candidate replies. It implements engine.Generator,
// engine.Prefiller and engine.StatusReporter and is safe for concurrent use.
type Engine struct {
	opts Options
	log  *slog.Logger

	model   *llama.Model
	lctx    *kvContext
	vocab   vocabRef
	sv      *steerVocab // the vocabulary classified for steering
	tmpl    string
	info    modelfile.GGUF
	backend string
	loaded  time.Time
	batch   *llama.Batch
	cells   int // KV cells of the pool

	// Owner goroutine state. cur is what the prompt sequence holds;
	// dialogs keeps other dialogs' prompts.
	cur     current
	dialogs *dialogCache
	replies *replyBook // the tokens of the replies offered, by dialog
	parked  *parkedReplies
	genSeqs []int // one sequence per candidate
	// genLen is the number of KV positions each candidate sequence holds;
	// the owner goroutine zeroes it when it frees the sequence.
	genLen []int
	// batched[n] tells whether n candidates are sampled batched (else one
	// after another); stepCost[n] is the measured cost of one decode step
	// of n sequences (0 when not measured).
	batched  []bool
	stepCost []time.Duration
	// aloneFirst[n]: a batched request of n candidates decodes the first
	// alone, then the others batched (chooseDecoding, firstAloneCheaper).
	aloneFirst []bool
	// promptRate is Options.PromptRate or the prompt speed Open measured,
	// in tokens a second (0 without a ColdPromptTarget).
	promptRate float64
	// promptSlope is how much a prompt token's cost grows with every cell
	// before it, in seconds, measured with promptRate (0 when the speed is
	// injected): the history budget counts attention over the context.
	promptSlope float64
	nReq        atomic.Uint64

	// stepHook, when set (tests), runs on the owner goroutine before every
	// decode of a request with the decode's ordinal number.
	stepHook func(step int)
	// decodeHook, when set (tests), runs right before llama.cpp's decode,
	// after the checks of the request's context.
	decodeHook func(step int)

	freeOnce sync.Once // Close frees the C state once

	mu      sync.Mutex
	pending []*job
	running bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// current is the dialog the prompt sequence holds.
type current struct {
	key    string // dialog_id, "" for none
	tokens []int
	saved  bool // the dialog cache holds exactly these tokens under key
}

type job struct {
	ctx      context.Context
	req      engine.GenerateRequest
	decoding Decoding     // DecodeAuto: as Open measured
	prefill  bool         // evaluate the prompt up to the last turn only; nobody waits
	fn       func() error // run on the owner goroutine instead of a request (StepTimes)
	queued   time.Time
	res      chan jobResult
}

type jobResult struct {
	gen engine.Generation
	err error
}

var backendOnce sync.Once

// Open loads the model (memory-mapped), creates the llama.cpp context,
// evaluates a short warm-up decode, times batched against sequential
// decoding when Options.Decoding is DecodeAuto, and starts the goroutine
// that owns the context. A file that cannot be loaded gives a *engine.Error
// of KindLLM naming the file and the reason. Close frees the context and
// the model.
func Open(opts Options) (*Engine, error) {
	if opts.ContextPerSeq <= 0 {
		opts.ContextPerSeq = DefaultContextPerSeq
	}
	if opts.Threads <= 0 {
		opts.Threads = DefaultThreads()
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
		return fail(gpuMemoryHint(reason, backend))
	}

	// One pool of cells: the longest prompt with its first candidate's
	// reply, and the other candidates' replies.
	cells := opts.ContextPerSeq + (opts.MaxCandidates-1)*opts.MaxReplyTokens
	lctx, err := newKVContext(model, contextConfig{cells: cells, seqs: 1 + opts.MaxCandidates, threads: opts.Threads, gpu: backend != "cpu"})
	if err != nil {
		reason := takeLastCError()
		llama.FreeModel(model)
		if reason == "" {
			reason = "llama.cpp could not create a context: " + err.Error()
		}
		return fail(gpuMemoryHint(reason, backend))
	}
	batch, err := llama.NewBatch(promptChunk, 1, 0)
	if err != nil {
		// The context cannot be freed; it is small when this fails.
		return fail("cannot allocate a batch")
	}
	e := &Engine{
		opts: opts, log: log, model: model, lctx: lctx, vocab: newVocabRef(model),
		info: info, backend: backend, batch: batch, cells: cells,
		dialogs: newDialogCache(opts.PrefixCacheMiB << 20),
		replies: newReplyBook(),
		wake:    make(chan struct{}, 1), done: make(chan struct{}),
	}
	for i := 0; i < opts.MaxCandidates; i++ {
		e.genSeqs = append(e.genSeqs, promptSeq+1+i)
	}
	e.genLen = make([]int, opts.MaxCandidates)
	e.tmpl = e.chooseTemplate(info.ChatTemplate)
	t0 := time.Now()
	e.sv = newSteerVocab(e.vocab, model.NumVocab())
	log.Debug("vocabulary classified for steering", "tokens", e.sv.n, "trie_nodes", len(e.sv.all.nodes), "ms", time.Since(t0).Milliseconds())
	if err := e.warmUp(); err != nil {
		return fail("warm-up decode failed: " + err.Error())
	}
	e.chooseDecoding()
	if opts.ColdPromptTarget > 0 {
		e.promptRate = opts.PromptRate
		if e.promptRate <= 0 {
			if e.promptRate, e.promptSlope, err = e.measurePromptRate(); err != nil {
				return fail("measuring the prompt speed failed: " + err.Error())
			}
		}
		log.Info("history budget set", "prompt_tokens_per_s", int(e.promptRate), "prompt_us_per_token_per_1000_cells", int(e.promptSlope*1e9), "cold_prompt_target_ms", opts.ColdPromptTarget.Milliseconds(),
			"history_budget_tokens", e.historyBudget())
	}
	e.loaded = time.Now()
	log.Info("language model loaded", "model", path, "arch", info.Arch, "backend", backend,
		"gpu_layers", ngl, "threads", opts.Threads, "ctx_per_seq", opts.ContextPerSeq, "kv_cells", cells,
		"kv_mib", cells*kvBytesPerToken(info)>>20, "candidate_seqs", opts.MaxCandidates,
		"max_reply_tokens", opts.MaxReplyTokens, "dialog_cache_mib", opts.PrefixCacheMiB, "demo", opts.Demo)
	go e.loop()
	return e, nil
}

// chooseTemplate returns the model's own chat template when llama.cpp's
// built-in templates recognise it, and ChatML otherwise.
func (e *Engine) chooseTemplate(src string) string {
	if src != "" {
		if _, err := applyTemplate(src, []chatMessage{{Role: "user", Content: "x"}}, true); err == nil {
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
	e.batch.Clear()
	for i, t := range toks {
		e.batch.Add(t, nil, i, i == len(toks)-1, promptSeq)
	}
	err = e.lctx.Decode(e.batch)
	e.lctx.KvCacheSeqRm(promptSeq, -1, -1)
	return err
}

// Generate returns up to req.N distinct candidate replies, best first. N is
// clamped to 1..MaxCandidates and Temperature to 0..2; temperature 0 makes
// the first candidate greedy and samples the others at 0.5 so they differ.
// Requests wait in arrival order, without a bound of their own: the
// pipeline's Scheduler admits them (REPLYD_QUEUE_SIZE). A cancelled context or
// passed deadline returns a KindCanceled error, taking the request out of
// the queue or stopping its decode and freeing its sequences. After Close it
// returns KindNotReady.
func (e *Engine) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	return e.generate(ctx, req, DecodeAuto)
}

// Prefill implements engine.Prefiller: it queues the evaluation of req's
// prompt up to its last turn into the prompt sequence (saving the dialog
// that was there) and returns. A closed engine skips it.
func (e *Engine) Prefill(ctx context.Context, req engine.GenerateRequest) {
	j := &job{ctx: ctx, req: req, prefill: true, queued: time.Now()}
	if err := e.enqueue(j); err != nil {
		e.log.Debug("prefill skipped", "reason", err.Error())
	}
}

func (e *Engine) generate(ctx context.Context, req engine.GenerateRequest, d Decoding) (engine.Generation, error) {
	if err := ctx.Err(); err != nil {
		return engine.Generation{}, canceled(err)
	}
	j := &job{ctx: ctx, req: req, decoding: d, queued: time.Now(), res: make(chan jobResult, 1)}
	if err := e.enqueue(j); err != nil {
		return engine.Generation{}, err
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

// enqueue appends j to the queue and wakes the owner.
func (e *Engine) enqueue(j *job) error {
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return engine.Errorf(engine.KindNotReady, nil, "the language model is closed")
	}
	e.pending = append(e.pending, j)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// waitingLocked counts the queued requests that someone waits for.
func (e *Engine) waitingLocked() int {
	n := 0
	for _, j := range e.pending {
		if !j.prefill {
			n++
		}
	}
	return n
}

func canceled(err error) error {
	return engine.Errorf(engine.KindCanceled, err, "the request was cancelled or its deadline passed")
}

// QueueDepth returns the number of requests waiting or running.
func (e *Engine) QueueDepth() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.waitingLocked()
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

// Close stops the owner goroutine after the running request, fails the
// waiting ones with KindNotReady, and then frees the llama.cpp context, the
// batch and the model (its mapping), so that a model switched away from
// gives its memory back. Close is idempotent; nothing but Status and
// QueueDepth may be called after it.
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
		if j.res != nil {
			j.res <- jobResult{err: engine.Errorf(engine.KindNotReady, nil, "the language model is closing")}
		}
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
	<-e.done
	// The owner goroutine has returned: nothing touches the C state now.
	e.freeOnce.Do(func() {
		e.lctx.free()
		if e.batch != nil {
			e.batch.Free()
		}
		llama.FreeModel(e.model)
	})
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
		e.running = !j.prefill
		e.mu.Unlock()

		if j.fn != nil {
			err := j.fn()
			e.mu.Lock()
			e.running = false
			e.mu.Unlock()
			j.res <- jobResult{err: err}
			continue
		}
		if j.prefill {
			if err := e.prefill(j); err != nil && engine.KindOf(err) != engine.KindCanceled {
				e.log.Warn("prefill failed", "error", err.Error())
			}
			continue
		}
		gen, err := e.serve(j)
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
		j.res <- jobResult{gen: gen, err: err}
	}
}

// gpuMemoryHint adds to a load failure on a GPU backend what the operator
// can do: replyd does not fall back to the CPU on its own (a box that was
// meant to answer in a fraction of a second would answer in seconds
// without anyone being told), so too little GPU memory stops the start
// with this message (docs/gpu.md, measured on an H100 whose memory another
// process held).
func gpuMemoryHint(reason, backend string) string {
	if backend == "cpu" {
		return reason
	}
	return reason + " (on the " + backend + " backend: when the GPU's memory is short, set REPLYD_GPU_LAYERS to fewer layers, or 0 for the CPU)"
}
