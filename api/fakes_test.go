package api

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
)

// fakeInferer answers with fn and records every request it gets.
type fakeInferer struct {
	mu   sync.Mutex
	fn   func(ctx context.Context, req engine.Request) (engine.Result, error)
	reqs []engine.Request
}

func (f *fakeInferer) Infer(ctx context.Context, req engine.Request) (engine.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	fn := f.fn
	f.mu.Unlock()
	return fn(ctx, req)
}

func (f *fakeInferer) last() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return engine.Request{}
	}
	return f.reqs[len(f.reqs)-1]
}

func (f *fakeInferer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// echoInferer returns one candidate per requested candidate, built from the
// request's shape (never its text), each sent to OnCandidate, and transcribes any audio as
// "transcript of N bytes" like a pipeline would, filling the marked message.
func echoInferer(ctx context.Context, req engine.Request) (engine.Result, error) {
	var res engine.Result
	if req.Audio != nil {
		res.HasTranscript = true
		res.Transcript = "transcript of " + strconv.Itoa(len(req.Audio)) + " bytes"
		res.AudioSeconds = 4.2
		res.Timings.Decode = 3 * time.Millisecond
		res.Timings.STT = 40 * time.Millisecond
		if req.OnTranscript != nil {
			req.OnTranscript(engine.Heard{Transcript: res.Transcript})
		}
	}
	for i := 0; i < req.MaxCandidates; i++ {
		c := engine.Candidate{
			Text:     "reply " + strconv.Itoa(i+1),
			Rank:     i + 1,
			Length:   2,
			Language: "en",
		}
		res.Candidates = append(res.Candidates, c)
		if req.OnCandidate != nil {
			req.OnCandidate(c) // as each completes, as the pipeline does
		}
	}
	res.PartnerTurn = engine.PartnerTurn(req.Messages)
	res.Timings.Prompt = 5 * time.Millisecond
	res.Timings.Generation = 20 * time.Millisecond
	res.PromptTokens, res.CachedTokens, res.GenTokens = 60, 10, 2*req.MaxCandidates
	res.Timings.Queue = time.Millisecond
	res.Timings.Total = 70 * time.Millisecond
	return res, nil
}

// fakeNotifier captures the codes it is asked to send.
type fakeNotifier struct {
	mu    sync.Mutex
	codes []string
	texts []string
	err   error
}

func (n *fakeNotifier) Channel() string { return "console" }

func (n *fakeNotifier) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	n.codes = append(n.codes, code)
	n.texts = append(n.texts, text)
	return nil
}

func (n *fakeNotifier) textsCopy() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.texts)
}

func (n *fakeNotifier) codesCopy() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.codes)
}

// waitFor polls cond for up to 5 s (alerts are sent in the background).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5 s")
}

// lastCode returns the last code delivered (alerts carry none).
func (n *fakeNotifier) lastCode() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.codes) - 1; i >= 0; i-- {
		if n.codes[i] != "" {
			return n.codes[i]
		}
	}
	return ""
}

// fakeHealth reports fixed engine states.
type fakeHealth struct {
	mu      sync.Mutex
	engines []engine.EngineStatus
	vad     engine.EngineStatus
	depth   int
}

func (h *fakeHealth) VAD() engine.EngineStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vad
}

func (h *fakeHealth) Engines() []engine.EngineStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.engines)
}

func (h *fakeHealth) QueueDepth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.depth
}

func (h *fakeHealth) set(engines ...engine.EngineStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.engines = engines
}

// fakeClock is a settable clock. With tick set, every reading moves it on
// by tick, as a real clock moves between two readings of one request.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	tick time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.tick)
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
