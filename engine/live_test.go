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
		return Transcript{Text: "hi", Language: "en"}, nil
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
	if r.err != nil || r.h == nil || r.h.Transcript != "hi" {
		t.Fatalf("HearAhead: %+v, %v; want the transcript, its own prompt work waiting", r.h, r.err)
	}
	waitFor(t, func() bool { return cpu.Free() == 2 && cpu.Waiting() == 0 })
}
