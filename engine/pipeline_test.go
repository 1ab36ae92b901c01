package engine

import (
	"context"
	"slices"
	"testing"
)

// growingSTT is a speech-to-text stage that asks to grow as Whisper's encoder
// does, and runs a test's step between the asks.
type growingSTT struct {
	between func()
	got     []int
	threads int
}

func (s *growingSTT) Transcribe(_ context.Context, _ []float32, opts TranscribeOptions) (Transcript, error) {
	s.threads = opts.Threads
	s.got = append(s.got, opts.Grow(4))
	s.between()
	s.got = append(s.got, opts.Grow(4))
	s.got = append(s.got, opts.Grow(opts.Threads))
	return Transcript{Text: "hi"}, nil
}

// TestTranscriptionBorrowsFreeCores: a transcription starts on STTThreads
// cores, grows into the cores nobody uses, gives them back when another
// stage asks for one, and leaves the whole budget free when it ends.
func TestTranscriptionBorrowsFreeCores(t *testing.T) {
	cpu := NewScheduler(SchedulerConfig{Cores: 2, STTThreads: 1})
	stt := &growingSTT{}
	p := &Pipeline{Sched: cpu, STT: stt}
	served := make(chan int, 1)
	stt.between = func() {
		go func() {
			n, _ := cpu.Acquire(context.Background(), 1, 1)
			served <- n
		}()
		waitFor(t, func() bool { return cpu.Contended() })
	}
	if _, err := p.transcribe(context.Background(), make([]float32, 16000), TranscribeOptions{}, func() {}); err != nil {
		t.Fatal(err)
	}
	if stt.threads != 1 {
		t.Errorf("started on %d threads, want STTThreads 1", stt.threads)
	}
	// 2 while the other core was free, 1 once a stage waited, 1 at the end.
	if want := []int{2, 1, 1}; !slices.Equal(stt.got, want) {
		t.Errorf("Grow gave %v, want %v", stt.got, want)
	}
	if n := <-served; n != 1 {
		t.Errorf("the waiting stage got %d cores", n)
	}
	cpu.Release(1)
	if cpu.Free() != 2 {
		t.Errorf("free %d after the transcription, want 2", cpu.Free())
	}
}

// TestTranscriptionBorrowsOnlyAlone: with another request in a stage of the
// pipeline (here the language model's), a transcription keeps to its own
// cores even when the others are free.
func TestTranscriptionBorrowsOnlyAlone(t *testing.T) {
	cpu := NewScheduler(SchedulerConfig{Cores: 2, STTThreads: 1})
	stt := &growingSTT{between: func() {}}
	p := &Pipeline{Sched: cpu, STT: stt}
	done, err := cpu.LLM.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.transcribe(context.Background(), make([]float32, 16000), TranscribeOptions{}, func() {}); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 1, 1}; !slices.Equal(stt.got, want) {
		t.Errorf("Grow gave %v with another request in the pipeline, want %v", stt.got, want)
	}
	done(0)
	stt.got = nil
	if _, err := p.transcribe(context.Background(), make([]float32, 16000), TranscribeOptions{}, func() {}); err != nil {
		t.Fatal(err)
	}
	if stt.got[0] != 2 {
		t.Errorf("Grow gave %v alone, want 2 first", stt.got)
	}
	if cpu.Free() != 2 {
		t.Errorf("free %d after the transcriptions", cpu.Free())
	}
}
