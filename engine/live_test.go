package engine

import (
	"context"
	"testing"
)

// heldSTT transcribes once release is closed, or fails when its context
// ends first.
type heldSTT struct{ release chan struct{} }

func (s heldSTT) Transcribe(ctx context.Context, _ []float32, _ TranscribeOptions) (Transcript, error) {
	select {
	case <-s.release:
		return Transcript{Text: "hi", Language: "en", Model: "base.en.bin"}, nil
	case <-ctx.Done():
		return Transcript{}, Errorf(KindCanceled, ctx.Err(), "transcription canceled")
	}
}

// queuedPrefill is a Prefiller that, as engine/llm does, waits for cores
// for each prompt chunk at the priority its context carries (PriorityAhead
// unless marked).
type queuedPrefill struct {
	stubLLM
	cpu *Scheduler
}

func (q queuedPrefill) Prefill(ctx context.Context, _ GenerateRequest) {
	go func() {
		if n, err := q.cpu.AcquireAt(ctx, PriorityOf(ctx, PriorityAhead), 1, 2); err == nil {
			q.cpu.Release(n)
		}
	}()
}

// TestHearAheadPromptWorkKeepsItsPass: a speculative pass's prompt work,
// waiting for the cores the pass's own transcription holds, does not cancel
// the pass (it waits at PrioritySpeculative); the transcript comes back.
func TestHearAheadPromptWorkKeepsItsPass(t *testing.T) {
	cpu := NewScheduler(SchedulerConfig{Cores: 2})
	stt := heldSTT{release: make(chan struct{})}
	p := &Pipeline{Sched: cpu, STT: stt, LLM: queuedPrefill{cpu: cpu}, Overlap: true}
	type result struct {
		h   *HeardAhead
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := p.HearAhead(context.Background(), Request{
			Messages: []Message{{Role: RoleDisabledPerson, Content: "Hello."}, {Role: RoleSpeaker, Audio: true}},
			PCM:      make([]float32, LiveRate),
		})
		done <- result{h, err}
	}()
	// The prompt work waits for the cores the transcription holds.
	waitFor(t, func() bool { return cpu.Waiting() > 0 })
	close(stt.release)
	r := <-done
	if r.err != nil || r.h == nil || r.h.Transcript != "hi" || r.h.Model != "base.en.bin" {
		t.Fatalf("HearAhead: %+v, %v; want the transcript and its model, its own prompt work waiting", r.h, r.err)
	}
	waitFor(t, func() bool { return cpu.Free() == 2 && cpu.Waiting() == 0 })
}

// coreLLM generates, as engine/llm does, on cores taken at the priority its
// context carries (PriorityCommitted unless marked), holding them until
// release is closed or its context ends.
type coreLLM struct {
	cpu     *Scheduler
	release chan struct{}
	started chan Priority
}

func (g coreLLM) Generate(ctx context.Context, req GenerateRequest) (Generation, error) {
	prio := PriorityOf(ctx, PriorityCommitted)
	n, err := g.cpu.AcquireAt(ctx, prio, 1, 2)
	if err != nil {
		return Generation{}, Errorf(KindCanceled, err, "canceled waiting for cores")
	}
	defer g.cpu.Release(n)
	g.started <- prio
	select {
	case <-g.release:
		return Generation{Candidates: []Candidate{{Text: "reply to " + PartnerTurn(req.Messages)}}}, nil
	case <-ctx.Done():
		return Generation{}, Errorf(KindCanceled, ctx.Err(), "generation canceled")
	}
}

func replyAheadRequest() Request {
	return Request{
		Messages: []Message{{Role: RoleDisabledPerson, Content: "Hello."}, {Role: RoleSpeaker, Audio: true}},
		Heard:    &HeardAhead{Heard: Heard{Transcript: "tea or water?", Language: "en"}, AudioSeconds: 2, Model: "base.en.bin"},
		OnTranscript: func(Heard) {
			panic("ReplyAhead showed the transcript of a turn not yet ended")
		},
	}
}

// TestReplyAheadAnswersFromTheTranscript: replies generated from a
// transcript heard ahead run at PrioritySpeculative, carry the transcript,
// and show nothing (OnTranscript is not called).
func TestReplyAheadAnswersFromTheTranscript(t *testing.T) {
	cpu := NewScheduler(SchedulerConfig{Cores: 2})
	g := coreLLM{cpu: cpu, release: make(chan struct{}), started: make(chan Priority, 1)}
	p := &Pipeline{Sched: cpu, STT: stubSTT{}, LLM: g}
	close(g.release)
	res, err := p.ReplyAhead(context.Background(), replyAheadRequest())
	if err != nil {
		t.Fatal(err)
	}
	if prio := <-g.started; prio != PrioritySpeculative {
		t.Errorf("generated at %v, want speculative", prio)
	}
	if res.Transcript != "tea or water?" || len(res.Candidates) != 1 || res.Candidates[0].Text != "reply to tea or water?" || res.SpeechModel != "base.en.bin" {
		t.Errorf("result %+v: want the transcript heard ahead, its Whisper model and its reply", res)
	}
	if _, err := p.ReplyAhead(context.Background(), Request{}); err == nil {
		t.Error("ReplyAhead without a transcript heard ahead: no error")
	}
}

// TestReplyAheadGivesWay: replies generated ahead stop as soon as
// committed work waits for cores, or a committed request queues for the
// language model (StopSpeculative), and the cores go to the committed work.
func TestReplyAheadGivesWay(t *testing.T) {
	for _, how := range []string{"cores", "llm"} {
		cpu := NewScheduler(SchedulerConfig{Cores: 2})
		g := coreLLM{cpu: cpu, release: make(chan struct{}), started: make(chan Priority, 1)}
		p := &Pipeline{Sched: cpu, STT: stubSTT{}, LLM: g}
		errc := make(chan error, 1)
		go func() {
			_, err := p.ReplyAhead(context.Background(), replyAheadRequest())
			errc <- err
		}()
		<-g.started
		if how == "cores" {
			n, err := cpu.Acquire(context.Background(), 2, 2)
			if err != nil {
				t.Fatal(err)
			}
			cpu.Release(n)
		} else {
			cpu.StopSpeculative()
		}
		if err := <-errc; KindOf(err) != KindCanceled {
			t.Errorf("%s: ReplyAhead ended with %v, want canceled", how, err)
		}
		waitFor(t, func() bool { return cpu.Free() == 2 })
	}
}
