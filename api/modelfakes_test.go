package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/models"
)

// fakeSwitcher is the engines a models.Service switches in api's tests
// (models.Engines), and their health: what the api does around a switch
// (checks, the stored choice, the admin log, the error mapping) without
// engines. The Service itself is the real one.
type fakeSwitcher struct {
	*fakeHealth
	mu     sync.Mutex
	active map[string]string
	err    error // returned by the next Switch
	calls  []models.SwitchRequest
	// loading, when set, is called by Switch before it switches, as an
	// engine loading the file: the hook a test holds the switch in.
	loading func(req models.SwitchRequest)
	// starting makes the engines still loading at start (models.ErrBusy).
	starting bool
	// mem is the memory available; 0 means 1000 MiB.
	mem int64
}

func (f *fakeSwitcher) State(kind string) models.EngineState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return models.EngineState{Ready: !f.starting, Model: f.active[kind]}
}

func (f *fakeSwitcher) Switch(kind, mode, path, old string, _ time.Duration) error {
	req := models.SwitchRequest{Kind: kind, Path: path, Mode: mode}
	if f.loading != nil {
		f.loading(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
	if err := f.err; err != nil {
		f.err = nil
		return err
	}
	f.active[kind] = path
	return nil
}

func (f *fakeSwitcher) ActiveModel(kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active[kind]
}

func (f *fakeSwitcher) setStarting(v bool) { f.mu.Lock(); f.starting = v; f.mu.Unlock() }
func (f *fakeSwitcher) setMem(n int64)     { f.mu.Lock(); f.mem = n; f.mu.Unlock() }

func (f *fakeSwitcher) memAvailable() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mem == 0 {
		return 1000 << 20, nil
	}
	return f.mem, nil
}

// withModels gives the server a models.Service of the folder dir on the
// env's store and clock: with sw, the Service switches sw's models (sw is
// the health source too); with lm, it times (with fakeSpeech) and
// compares them.
func withModels(dir string, sw *fakeSwitcher, lm models.LanguageModels) func(*Options) {
	return func(o *Options) {
		so := models.ServiceOptions{Dir: dir, Node: o.Node, Store: o.Store, Log: o.Logger, Now: o.Now}
		if sw != nil {
			o.Health = sw
			so.Engines, so.MemAvailable = sw, sw.memAvailable
		}
		if lm != nil {
			so.LLM, so.STT, so.CPU = lm, fakeSpeech{}, engine.NewScheduler(engine.SchedulerConfig{Cores: 2})
		}
		o.Models = models.NewService(so)
	}
}

// fakeLM is a language model of api's tests: it answers every request with
// its candidates, after gen's time; block, when set, holds its answers
// until it is closed; preempt stops its first request as a request would.
type fakeLM struct {
	path    string
	cands   []string
	took    time.Duration
	figs    models.LLMFigures
	block   chan struct{}
	mu      sync.Mutex
	preempt bool
	reqs    []engine.GenerateRequest
}

func (m *fakeLM) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	preempt := m.preempt
	m.preempt = false
	m.mu.Unlock()
	if preempt {
		return engine.Generation{}, engine.Errorf(engine.KindCanceled, nil, "stopped for a request")
	}
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return engine.Generation{}, ctx.Err()
		}
	}
	gen := engine.Generation{Prompt: m.took / 4, Generation: m.took - m.took/4, GenTokens: 5 * len(m.cands)}
	for _, c := range m.cands {
		gen.Candidates = append(gen.Candidates, engine.Candidate{Text: c})
	}
	return gen, nil
}

func (m *fakeLM) Status() engine.EngineStatus { return engine.EngineStatus{Name: "llm", Model: m.path} }
func (m *fakeLM) Figures() models.LLMFigures  { return m.figs }
func (m *fakeLM) Close() error                { return nil }

// requests are the requests the model was asked, oldest first.
func (m *fakeLM) requests() []engine.GenerateRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]engine.GenerateRequest(nil), m.reqs...)
}

// fakeLMs are the language models a models.Service times and compares in
// api's tests: cand is what every candidate file opens as, act the active
// model; err, when set, is the next opening's.
type fakeLMs struct {
	act, cand *fakeLM
	mu        sync.Mutex
	err       error
}

func (f *fakeLMs) OpenIdle(path string) (models.LanguageModel, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err; err != nil {
		f.err = nil
		return nil, err
	}
	f.cand.mu.Lock()
	f.cand.path = path
	f.cand.mu.Unlock()
	return f.cand, nil
}

func (f *fakeLMs) Active() (models.LanguageModel, func(), error) { return f.act, func() {}, nil }

// timingLMs are language models whose figures are fixed: the candidate
// 100 prompt tokens/s and 10 ms a step, the active one (active) 200 and
// 5 ms.
func timingLMs(active string) *fakeLMs {
	return &fakeLMs{
		cand: &fakeLM{figs: models.LLMFigures{PromptTokensPerS: 100, Candidates: 4, Step: 10 * time.Millisecond, HistoryBudget: 400, MaxReplyTokens: 20}},
		act:  &fakeLM{path: active, figs: models.LLMFigures{PromptTokensPerS: 200, Candidates: 4, Step: 5 * time.Millisecond, HistoryBudget: 800, MaxReplyTokens: 20}},
	}
}

// fakeSpeech are Whisper models no api test times.
type fakeSpeech struct{}

func (fakeSpeech) Open(string) (models.SpeechModel, error) {
	return nil, errors.New("no Whisper model in api's tests")
}

func (fakeSpeech) Active() (models.SpeechModel, func(), error) {
	return nil, nil, errors.New("no Whisper model in api's tests")
}
