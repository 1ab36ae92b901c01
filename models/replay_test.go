package models

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
)

// TestCompareScoring: the rules docs/models.md states for one replay: exact
// after normalizing, near within one word, keystrokes by score.Edited, a
// steered replay's actions as replyd eval --steer counts them, and the
// tally's rates and means.
func TestCompareScoring(t *testing.T) {
	const reply = "I'd like some tea, please."
	cands := []engine.Candidate{{Text: "No thanks."}, {Text: "I'd like tea please"}}
	if !nearHit(cands, reply) {
		t.Error("one word dropped is not near")
	}
	if nearHit([]engine.Candidate{{Text: "I'd like coffee please"}}, reply) {
		t.Error("one word changed and one dropped is near")
	}
	var tl compareTally
	for i, cs := range [][]string{{"No thanks.", "i'd like some tea please"}, {"No thanks.", "I'd like tea please"}} {
		tl.Add(score.Rank(cs, reply))
		tl.turns++
		if nearHit([]engine.Candidate{{Text: cs[0]}, {Text: cs[1]}}, reply) {
			tl.near++
		}
		tl.turnTime += time.Duration(i+1) * 10 * time.Millisecond
		tl.genTokens, tl.genCnt = tl.genTokens+30, tl.genCnt+2
	}
	// Steered: "iwlt"-like keys 4; a hit costs one selection more, a miss
	// the reply typed whole.
	chars, actions, hit := steeredActions([]string{"I would like tea"}, "I would like tea.", 4)
	if chars != 17 || actions != 5 || !hit {
		t.Errorf("steered hit: %d chars, %d actions, %v", chars, actions, hit)
	}
	tl.steered, tl.sChars, tl.sActions, tl.hits = 1, chars, actions, 1
	chars, actions, hit = steeredActions([]string{"I want water"}, "I would like tea.", 4)
	if chars != 17 || actions != 21 || hit {
		t.Errorf("steered miss: %d chars, %d actions, %v", chars, actions, hit)
	}
	tl.steered, tl.sChars, tl.sActions = 2, tl.sChars+chars, tl.sActions+actions
	f := tl.figures()
	// The reply has 26 characters. Turn 1's best candidate is 3 edits
	// away (the case of "i", the comma, the full stop): 26-3-1 = 22 saved;
	// turn 2's is 7 ("some ", the comma, the full stop): 26-7-1 = 18.
	want := CompareFigures{Turns: 2, ExactRate: 0.5, Top1Rate: 0, NearRate: 1,
		KeystrokesSaved: 40, KeystrokesTyped: 52, KeystrokeSaving: round3(40.0 / 52),
		SteeredTurns: 2, SteeredHits: 1, SteeredKSR: round3(float64(34-26) / 34), TurnMS: 15, ReplyTokens: 15}
	if f != want {
		t.Errorf("figures\n got %+v\nwant %+v", f, want)
	}
}

// lm is a language model of a test: it answers every request with its
// candidates, the first request stopped as a request would stop it when
// preempt is set.
type lm struct {
	path    string
	cands   []string
	figs    LLMFigures
	mu      sync.Mutex
	preempt bool
	reqs    []engine.GenerateRequest
	closed  bool
}

func (m *lm) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if m.preempt {
		m.preempt = false
		return engine.Generation{}, engine.Errorf(engine.KindCanceled, nil, "stopped for a request")
	}
	gen := engine.Generation{Prompt: 10 * time.Millisecond, Generation: 30 * time.Millisecond, GenTokens: 4 * len(m.cands)}
	for _, c := range m.cands {
		gen.Candidates = append(gen.Candidates, engine.Candidate{Text: c})
	}
	return gen, nil
}

func (m *lm) Status() engine.EngineStatus { return engine.EngineStatus{Name: "llm", Model: m.path} }
func (m *lm) Figures() LLMFigures         { return m.figs }
func (m *lm) Close() error                { m.closed = true; return nil }

// lms open cand and lend act.
type lms struct {
	act, cand *lm
	fail      error
}

func (l *lms) OpenIdle(path string) (LanguageModel, error) {
	if l.fail != nil {
		return nil, l.fail
	}
	l.cand.path = path
	return l.cand, nil
}

func (l *lms) Active() (LanguageModel, func(), error) { return l.act, func() {}, nil }

// stt is a Whisper model of a test.
type stt struct {
	path  string
	calls int
}

func (m *stt) Transcribe(ctx context.Context, pcm []float32, opts engine.TranscribeOptions) (engine.Transcript, error) {
	m.calls++
	if len(pcm) != timingAudioSeconds*16000 || opts.Threads < 1 || opts.Grow == nil {
		return engine.Transcript{}, errors.New("not the timing's audio at idle priority")
	}
	return engine.Transcript{Text: "hm"}, nil
}

func (m *stt) Status() engine.EngineStatus { return engine.EngineStatus{Name: "stt", Model: m.path} }
func (m *stt) Close() error                { return nil }

type stts struct{ act, cand *stt }

func (s stts) Open(path string) (SpeechModel, error) { s.cand.path = path; return s.cand, nil }
func (s stts) Active() (SpeechModel, func(), error)  { return s.act, func() {}, nil }

// actionService is a Service whose engines hold old.gguf (llm) and
// old.bin (whisper), with cand.gguf and cand.bin to time or compare.
func actionService(t *testing.T, l *lms, s stts) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"old.gguf", "cand.gguf", "old.bin", "cand.bin"} {
		mustWrite(t, dir, n, make([]byte, 2<<20))
	}
	eng := &fakeEngines{state: map[string]EngineState{
		"llm":     {Ready: true, Model: filepath.Join(dir, "old.gguf")},
		"whisper": {Ready: true, Model: filepath.Join(dir, "old.bin")},
	}}
	svc := NewService(ServiceOptions{Engines: eng, LLM: l, STT: s, CPU: engine.NewScheduler(engine.SchedulerConfig{Cores: 2}),
		MemAvailable: func() (int64, error) { return 1 << 30, nil }})
	return svc, dir
}

// TestReplayTurns: a comparison replays each turn on both models, the
// first of the two in turn, steered turns twice, with the same seeds on
// both; a replay stopped for a request runs again and is counted.
func TestReplayTurns(t *testing.T) {
	l := &lms{act: &lm{cands: []string{"No thanks."}, preempt: true}, cand: &lm{cands: []string{"No thanks.", "I would like tea"}}}
	svc, dir := actionService(t, l, stts{&stt{}, &stt{}})
	l.act.path = filepath.Join(dir, "old.gguf")
	if !svc.CanCompare() {
		t.Fatal("cannot compare")
	}
	if _, err := svc.BeginCompare("whisper", filepath.Join(dir, "cand.bin")); !errors.Is(err, ErrUnusable) {
		t.Errorf("a Whisper comparison: %v", err)
	}
	run, err := svc.BeginCompare("llm", filepath.Join(dir, "cand.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	// The run holds the one model action.
	if _, err := svc.Time(context.Background(), "llm", filepath.Join(dir, "cand.gguf")); !errors.Is(err, ErrBusy) {
		t.Errorf("a timing while a comparison is begun: %v", err)
	}
	turns := []CompareTurn{
		{Partner: "Tea?", Reply: "I would like tea.", SystemPrompt: "p", Candidates: 2, Temperature: 0.5},
		{Partner: "Coffee?", Reply: "No thanks", SystemPrompt: "p", Candidates: 2, Temperature: 0.5, SteerMode: string(engine.SteerPrefix)},
	}
	var progress []int
	res, err := run(context.Background(), turns, func(done, total int) { progress = append(progress, done*10+total) })
	if err != nil {
		t.Fatal(err)
	}
	if !l.cand.closed || l.act.closed {
		t.Errorf("candidate closed %v, active closed %v", l.cand.closed, l.act.closed)
	}
	// 2 turns on 2 models, the steered one twice more: 6 replays.
	if len(progress) != 6 || progress[5] != 66 {
		t.Errorf("progress %v", progress)
	}
	if res.Preempted != 1 || !strings.HasSuffix(res.Reason, "it was compared beside the active one") ||
		res.Candidate.Model != filepath.Join(dir, "cand.gguf") || res.Active.Model != filepath.Join(dir, "old.gguf") {
		t.Errorf("result %+v", res)
	}
	if res.Candidate.Turns != 2 || res.Candidate.ExactRate != 1 || res.Candidate.Top1Rate != 0.5 || res.Candidate.SteeredTurns != 1 || res.Candidate.SteeredHits != 1 ||
		res.Active.Turns != 2 || res.Active.ExactRate != 0.5 || res.Active.TurnMS != 40 || res.Active.ReplyTokens != 4 {
		t.Errorf("figures: candidate %+v, active %+v", res.Candidate, res.Active)
	}
	// Both models draw with the same seed for a turn; the steered replay
	// carries its constraint.
	for _, m := range []*lm{l.act, l.cand} {
		var seeds []uint32
		for _, r := range m.reqs {
			seeds = append(seeds, r.Seed)
		}
		last := m.reqs[len(m.reqs)-1]
		if seeds[len(seeds)-1] != compareSeed+1 || last.Steer == nil || last.Steer.Prefix != "No " || last.N != 2 || last.Temperature != 0.5 {
			t.Errorf("%s: seeds %v, last %+v", m.path, seeds, last)
		}
	}
	// The action is released: a candidate that fails to load is the
	// admin's mistake.
	l.fail = errors.New("bad tensor")
	run, err = svc.BeginCompare("llm", filepath.Join(dir, "cand.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), turns, func(int, int) {}); !errors.Is(err, ErrUnusable) {
		t.Errorf("a candidate that fails: %v", err)
	}
}

// TestTime: a timing reads a language model's figures as it opened, and
// transcribes the fixed audio twice with each Whisper model at idle
// priority.
func TestTime(t *testing.T) {
	l := &lms{act: &lm{figs: LLMFigures{PromptTokensPerS: 200.04, Candidates: 4, Step: 5123 * time.Microsecond, HistoryBudget: 800, MaxReplyTokens: 20}},
		cand: &lm{figs: LLMFigures{PromptTokensPerS: 100, Candidates: 4, Step: 10 * time.Millisecond, HistoryBudget: 400, MaxReplyTokens: 20}}}
	s := stts{&stt{path: "active.bin"}, &stt{}}
	svc, dir := actionService(t, l, s)
	l.act.path = filepath.Join(dir, "old.gguf")
	tm, err := svc.Time(context.Background(), "llm", filepath.Join(dir, "cand.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if tm.Candidate != (Figures{PromptTokensPerS: 100, Candidates: 4, StepMS: 10, HistoryBudgetTokens: 400, MaxReplyTokens: 20}) ||
		tm.Active != (Figures{Model: filepath.Join(dir, "old.gguf"), PromptTokensPerS: 200, Candidates: 4, StepMS: 5.12, HistoryBudgetTokens: 800, MaxReplyTokens: 20}) ||
		!strings.HasSuffix(tm.Reason, "it was timed beside the active one") || !l.cand.closed {
		t.Errorf("timing %+v", tm)
	}
	tm, err = svc.Time(context.Background(), "whisper", filepath.Join(dir, "cand.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if s.cand.calls != 2 || s.act.calls != 2 || tm.Candidate.AudioSeconds != timingAudioSeconds || tm.Active.Model != "active.bin" {
		t.Errorf("timing %+v; transcriptions %d, %d", tm, s.cand.calls, s.act.calls)
	}
	// Without room beside the active model, nothing is loaded.
	svc.memAvailable = func() (int64, error) { return 1 << 20, nil }
	if _, err := svc.Time(context.Background(), "whisper", filepath.Join(dir, "cand.bin")); !errors.Is(err, ErrTimeNoRoom) || s.cand.calls != 2 {
		t.Errorf("no room: %v", err)
	}
}
