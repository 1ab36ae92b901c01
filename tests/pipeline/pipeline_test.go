// Package pipeline runs engine.Pipeline on the real cgo engines
// (engine/whisper and engine/llm on the demo models). It lives outside
// engine because engine's own tests must not compile the cgo leaves: only
// cmd/replyd and tests may import them.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/testaudio"
)

// recordingLLM passes requests to the real engine and keeps the last one, so
// the test can see what the pipeline asked for.
type recordingLLM struct {
	engine.Generator
	mu   sync.Mutex
	last engine.GenerateRequest
}

func (r *recordingLLM) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	r.mu.Lock()
	r.last = req
	r.mu.Unlock()
	return r.Generator.Generate(ctx, req)
}

var (
	tmpRoot string // the demo models; TestMain removes it
	once    sync.Once
	stt     *whisper.Model
	lm      *llm.Engine
	loadErr error
)

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "replyd-pipeline-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// engines loads the demo models once for all tests of this file.
func engines(t *testing.T) (*whisper.Model, *llm.Engine) {
	t.Helper()
	once.Do(func() {
		wp, lp := filepath.Join(tmpRoot, "whisper-demo.bin"), filepath.Join(tmpRoot, "llm-demo.gguf")
		if loadErr = whisper.WriteDemoModel(wp); loadErr != nil {
			return
		}
		if loadErr = llm.WriteDemoModel(lp); loadErr != nil {
			return
		}
		if stt, loadErr = whisper.Load(wp, whisper.Options{Threads: 1, Demo: true}); loadErr != nil {
			return
		}
		lm, loadErr = llm.Open(llm.Options{ModelPath: lp, ContextPerSeq: 2048, Threads: 1, MaxReplyTokens: 8, MaxCandidates: 4, Demo: true})
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return stt, lm
}

// wav16k encodes seconds of a 220 Hz tone as 16-bit mono 16 kHz WAV.
func wav16k(seconds float64) []byte {
	n := int(seconds * 16000)
	return testaudio.Mono16(16000, testaudio.Sine(220, 16000, n, 8000.0/32767))
}

func TestPipelineTranscriptFillsMarkedMessage(t *testing.T) {
	s, l := engines(t)
	rec := &recordingLLM{Generator: l}
	p := &engine.Pipeline{Decode: audio.Decode, STT: s, LLM: rec, MaxAudio: 10 * time.Second}
	res, err := p.Infer(context.Background(), engine.Request{
		Messages: []engine.Message{
			{Role: engine.RoleDisabledPerson, Content: "Hello."},
			{Role: engine.RoleSpeaker, Audio: true},
		},
		Audio:         wav16k(2),
		MaxCandidates: 2, Temperature: 0.7, Seed: 7, SystemPrompt: "Reply as me.",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.HasTranscript || res.AudioSeconds != 2 || len(res.Candidates) == 0 {
		t.Fatalf("result: %+v", res)
	}
	got := rec.last.Messages
	if len(got) != 2 || got[1].Content != res.Transcript || got[0].Content != "Hello." || rec.last.SystemPrompt != "Reply as me." {
		t.Fatalf("the LLM got %+v, transcript %q", rec.last, res.Transcript)
	}
	if res.TranscriptLanguage == "" || rec.last.ReplyLanguage != res.TranscriptLanguage {
		t.Fatalf("reply language %q, transcript language %q", rec.last.ReplyLanguage, res.TranscriptLanguage)
	}
	for _, c := range res.Candidates {
		if c.Language != res.TranscriptLanguage {
			t.Fatalf("candidate language %q", c.Language)
		}
	}
	if res.Timings.Decode <= 0 || res.Timings.STT <= 0 || res.Timings.Total < res.Timings.STT {
		t.Fatalf("timings %+v", res.Timings)
	}
}

func TestPipelineErrorKinds(t *testing.T) {
	s, l := engines(t)
	p := &engine.Pipeline{Decode: audio.Decode, STT: s, LLM: l, MaxAudio: time.Second}
	msgs := []engine.Message{{Role: engine.RoleSpeaker, Audio: true}}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name  string
		ctx   context.Context
		audio []byte
		want  engine.Kind
	}{
		{"garbage", context.Background(), []byte("this is not audio at all, just text"), engine.KindUnsupportedAudio},
		{"empty", context.Background(), []byte{}, engine.KindBadAudio},
		{"too long", context.Background(), wav16k(2), engine.KindAudioTooLong},
		{"truncated", context.Background(), wav16k(0.5)[:30], engine.KindUnsupportedAudio},
		{"canceled", canceled, wav16k(0.5), engine.KindCanceled},
	}
	for _, c := range cases {
		_, err := p.Infer(c.ctx, engine.Request{Messages: msgs, Audio: c.audio, MaxCandidates: 1})
		if got := engine.KindOf(err); got != c.want {
			t.Errorf("%s: kind %d (%v), want %d", c.name, got, err, c.want)
		}
	}
}

func TestPipelineWithoutAudio(t *testing.T) {
	_, l := engines(t)
	p := &engine.Pipeline{Decode: audio.Decode, STT: nil, LLM: l, MaxAudio: time.Second}
	res, err := p.Infer(context.Background(), engine.Request{
		Messages:      []engine.Message{{Role: engine.RoleSpeaker, Content: "Tea?"}},
		Profile:       engine.Profile{Language: "de"},
		MaxCandidates: 2, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.HasTranscript || res.Transcript != "" || len(res.Candidates) == 0 || res.Candidates[0].Language != "de" {
		t.Fatalf("result %+v", res)
	}
	// Text only and no language: the reply's language is unknown, and says so.
	res, err = p.Infer(context.Background(), engine.Request{
		Messages:      []engine.Message{{Role: engine.RoleSpeaker, Content: "Tea?"}},
		MaxCandidates: 2, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Candidates {
		if c.Language != engine.LanguageUnknown {
			t.Errorf("candidate language %q without a language, want %q", c.Language, engine.LanguageUnknown)
		}
	}
	// The prompt differs from the one before only in its end (the language
	// is asked for after the partner's turn): what comes before is reused,
	// the end is evaluated.
	if res.PromptTokens <= 0 || res.GenTokens < len(res.Candidates) || res.CachedTokens >= res.PromptTokens {
		t.Fatalf("token counts: prompt %d cached %d generated %d", res.PromptTokens, res.CachedTokens, res.GenTokens)
	}
}

// orderLLM records the order of the language model's calls around the real
// engine.
type orderLLM struct {
	*llm.Engine
	log      *orderLog
	prefills []engine.GenerateRequest
	gens     []engine.GenerateRequest
	gen      engine.Generation
}

type orderLog struct {
	mu     sync.Mutex
	events []string
}

func (l *orderLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (o *orderLLM) Prefill(ctx context.Context, req engine.GenerateRequest) {
	o.log.add("prefill")
	o.prefills = append(o.prefills, req)
	o.Engine.Prefill(ctx, req)
}

func (o *orderLLM) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	o.log.add("generate")
	o.gens = append(o.gens, req)
	g, err := o.Engine.Generate(ctx, req)
	o.gen = g
	return g, err
}

// budgetSTT records the cores left free while it transcribes.
type budgetSTT struct {
	engine.Transcriber
	log  *orderLog
	cpu  *engine.Scheduler
	free int
}

func (s *budgetSTT) Transcribe(ctx context.Context, pcm []float32, o engine.TranscribeOptions) (engine.Transcript, error) {
	s.log.add("transcribe")
	s.free = s.cpu.Free()
	return s.Transcriber.Transcribe(ctx, pcm, o)
}

// TestPipelineOverlap: with Overlap the turns before the recording are
// prefilled before speech-to-text runs, the transcript is reported before
// the candidates are generated, and the language model then reuses the
// prefilled turns; speech-to-text holds its cores of the budget.
func TestPipelineOverlap(t *testing.T) {
	s, l := engines(t)
	for _, overlap := range []bool{true, false} {
		log := &orderLog{}
		cpu := engine.NewScheduler(engine.SchedulerConfig{Cores: 2, STTThreads: 1})
		lm := &orderLLM{Engine: l, log: log}
		stt := &budgetSTT{Transcriber: s, log: log, cpu: cpu}
		p := &engine.Pipeline{Decode: audio.Decode, STT: stt, LLM: lm, MaxAudio: 10 * time.Second,
			Sched: cpu, Overlap: overlap}
		msgs := []engine.Message{
			{Role: engine.RoleSpeaker, Content: "Good morning! Did you sleep well?"},
			{Role: engine.RoleDisabledPerson, Content: "Yes thanks."},
			{Role: engine.RoleSpeaker, Audio: true},
		}
		res, err := p.Infer(context.Background(), engine.Request{
			Messages: msgs, Audio: wav16k(2), DialogID: fmt.Sprintf("overlap-%v", overlap),
			Profile:       engine.Profile{Language: "en"},
			MaxCandidates: 2, Seed: 5, SystemPrompt: "Reply as me.",
			OnTranscript: func(engine.Heard) { log.add("transcript") },
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"transcribe", "transcript", "generate"}
		if overlap {
			want = append([]string{"prefill"}, want...)
		}
		if d := cmp.Diff(want, log.events); d != "" {
			t.Errorf("overlap %v: calls (-want +got):\n%s", overlap, d)
		}
		reserve := engine.TranscriptReserve(2 * time.Second)
		if len(lm.gens) != 1 || lm.gens[0].TranscriptReserve != reserve || lm.gens[0].Messages[2].Content != res.Transcript {
			t.Fatalf("overlap %v: generate requests %+v", overlap, lm.gens)
		}
		if overlap {
			if len(lm.prefills) != 1 || len(lm.prefills[0].Messages) != 2 || lm.prefills[0].TranscriptReserve != reserve ||
				lm.prefills[0].DialogID != lm.gens[0].DialogID {
				t.Fatalf("prefill requests %+v", lm.prefills)
			}
			// The system message and the two earlier turns are about 100
			// tokens of the demo model; the context held another dialog.
			if lm.gen.CachedTokens < 80 {
				t.Errorf("after the prefill the prompt reused %d of %d tokens", lm.gen.CachedTokens, lm.gen.PromptTokens)
			}
		}
		if stt.free > 1 || cpu.Free() != 2 {
			t.Errorf("overlap %v: %d cores free while transcribing (it holds 1 of 2), %d after", overlap, stt.free, cpu.Free())
		}
	}
}

// gateSTT holds every transcription until its gate is closed.
type gateSTT struct {
	engine.Transcriber
	entered chan struct{}
	gate    chan struct{}
}

func (g *gateSTT) Transcribe(ctx context.Context, pcm []float32, o engine.TranscribeOptions) (engine.Transcript, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Transcriber.Transcribe(ctx, pcm, o)
}

// TestPipelineWorkloadShedsEarly: once the stages' service times are known,
// a request that would wait more than its own work is refused before its
// audio is decoded.
func TestPipelineWorkloadShedsEarly(t *testing.T) {
	s, l := engines(t)
	stt := &gateSTT{Transcriber: s, entered: make(chan struct{}, 4), gate: make(chan struct{})}
	decoded := 0
	var mu sync.Mutex
	p := &engine.Pipeline{STT: stt, LLM: l, MaxAudio: 10 * time.Second,
		Sched: engine.NewScheduler(engine.SchedulerConfig{MaxWaitRatio: 1}),
		Decode: func(b []byte, max time.Duration) ([]float32, error) {
			mu.Lock()
			decoded++
			mu.Unlock()
			return audio.Decode(b, max)
		}}
	req := engine.Request{Messages: []engine.Message{{Role: engine.RoleSpeaker, Audio: true}}, Audio: wav16k(1), MaxCandidates: 1, Seed: 1}
	// Learn the service times.
	close(stt.gate)
	if _, err := p.Infer(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	<-stt.entered
	stt.gate = make(chan struct{})
	errs := make(chan error, 2)
	go func() { _, err := p.Infer(context.Background(), req); errs <- err }()
	<-stt.entered // the first holds the speech engine
	go func() { _, err := p.Infer(context.Background(), req); errs <- err }()
	for p.Sched.STT.InFlight() != 2 {
		time.Sleep(time.Millisecond) // the second waits for its turn
	}
	mu.Lock()
	before := decoded
	mu.Unlock()
	if _, err := p.Infer(context.Background(), req); !errors.Is(err, engine.ErrOverloaded) {
		t.Errorf("third request: %v, want ErrOverloaded", err)
	}
	mu.Lock()
	if decoded != before {
		t.Error("the refused request's audio was decoded")
	}
	mu.Unlock()
	close(stt.gate)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if p.Sched.Work.Outstanding() != 0 {
		t.Errorf("work still reserved: %v", p.Sched.Work.Outstanding())
	}
}

// fakeRecaller returns fixed examples (or an error) and records its calls.
type fakeRecaller struct {
	mu      sync.Mutex
	user    string
	query   string
	k       int
	calls   int
	answer  []engine.Example
	failure error
}

func (f *fakeRecaller) Recall(ctx context.Context, user, partnerTurn string, k int) ([]engine.Example, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.user, f.query, f.k = user, partnerTurn, k
	f.calls++
	return f.answer, f.failure
}

// TestPipelineRecallsOnTheTranscript: a remembering user's examples are
// looked up with the partner's turn as transcribed, reach the language
// model, and a failing memory does not fail the inference.
func TestPipelineRecallsOnTheTranscript(t *testing.T) {
	s, l := engines(t)
	rec := &recordingLLM{Generator: l}
	mem := &fakeRecaller{answer: []engine.Example{{Partner: "Tea?", Reply: "Yes please."}}}
	p := &engine.Pipeline{Decode: audio.Decode, STT: s, LLM: rec, MaxAudio: 10 * time.Second, Memory: mem}
	req := engine.Request{
		Messages:      []engine.Message{{Role: engine.RoleSpeaker, Content: "Earlier words."}, {Role: engine.RoleDisabledPerson, Content: "Mine."}, {Role: engine.RoleSpeaker, Audio: true}},
		Audio:         wav16k(1),
		MaxCandidates: 1, Seed: 2, MemoryUser: "p_user",
	}
	res, err := p.Infer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if mem.user != "p_user" || mem.query != strings.TrimSpace(res.Transcript) || mem.k != engine.MaxExamples || res.PartnerTurn != mem.query {
		t.Errorf("recall(%q, %q, %d); transcript %q, partner turn %q", mem.user, mem.query, mem.k, res.Transcript, res.PartnerTurn)
	}
	if len(rec.last.Examples) != 1 || res.Examples != 1 || res.ExampleTokens <= 0 {
		t.Errorf("examples: sent %v, used %d (%d tokens)", rec.last.Examples, res.Examples, res.ExampleTokens)
	}

	mem.failure = errors.New("disk on fire")
	req.Audio, req.Messages = nil, req.Messages[:2]
	req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSpeaker, Content: "Shall we go?"})
	res, err = p.Infer(context.Background(), req)
	if err != nil || res.RecallErr == nil || len(res.Candidates) == 0 || mem.query != "Shall we go?" {
		t.Errorf("failing memory: err %v, recall err %v, %d candidates, query %q", err, res.RecallErr, len(res.Candidates), mem.query)
	}

	calls := mem.calls
	req.MemoryUser = ""
	if _, err := p.Infer(context.Background(), req); err != nil || mem.calls != calls {
		t.Errorf("without remember the memory was asked (%d calls): %v", mem.calls-calls, err)
	}
}
