package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/shareddata"
)

// BenchmarkLiveSpeculativeYields measures what a live session's speculative
// pass costs another session's committed turn, on the real engines (Whisper
// and llama.cpp under one Scheduler of 2 cores, as `replyd serve` wires
// them): each iteration times one committed turn (a 3 s spoken question:
// transcription, then three candidates) alone, and one with a speculative
// pass (HearAhead) of another session over 8 s of speech started just
// before it, interleaved. It reports the medians and their ratio, and the
// granularity at which a speculative pass gives its cores up: the time
// from its cancellation (by the committed turn, as the scheduler does) to
// its return, against one encoder step (a layer's attention or MLP).
//
// The models are $REPLYD_BENCH_WHISPER and $REPLYD_BENCH_LLM (`replyd models
// synth --shape base.en` and `--shape qwen2.5-0.5b`); without them, the
// demo models:
//
//	REPLYD_BENCH_WHISPER=/tmp/synth/synth-base.en-q8_0.bin REPLYD_BENCH_LLM=/tmp/synth/synth-qwen2.5-0.5b-q8_0.gguf \
//	  go test -run '^$' -bench LiveSpeculativeYields -benchtime 5x ./cmd/replyd/
func BenchmarkLiveSpeculativeYields(b *testing.B) {
	wpath, lpath := os.Getenv("REPLYD_BENCH_WHISPER"), os.Getenv("REPLYD_BENCH_LLM")
	if wpath == "" || lpath == "" {
		dir := b.TempDir()
		if err := writeDemoModels(dir); err != nil {
			b.Fatal(err)
		}
		wpath, lpath = filepath.Join(dir, filepath.Base(DefaultWhisperModel)), filepath.Join(dir, filepath.Base(DefaultLLMModel))
	}
	question := shareddata.Speak(b, "Would you like a cup of tea with your lunch today?", "en-us", 0.2, 0.3, 0)
	long := shareddata.Speak(b, "I went to the market this morning and the queue at the baker was so long that I gave up and bought the bread at the corner shop instead.", "en-gb", 0.2, 0.3, 0)

	const cores = 2
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sched := engine.NewScheduler(engine.SchedulerConfig{Cores: cores, STTQueue: 4, LLMQueue: 4})
	stt, err := whisper.Load(wpath, whisper.Options{Threads: cores, NoFallback: true, MaxTokensPerWindow: 24, Demo: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer stt.Close()
	lm, err := llm.Open(llm.Options{ModelPath: lpath, ContextPerSeq: 2048, Threads: cores, MaxCandidates: 3, MaxReplyTokens: 16, CPU: sched, Demo: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	pipe := &engine.Pipeline{STT: stt, LLM: lm, Sched: sched, MaxAudio: 2 * time.Minute, Overlap: true}

	committed := func() time.Duration {
		req := engine.Request{
			Messages: []engine.Message{{Role: engine.RoleDisabledPerson, Content: "Hello."}, {Role: engine.RoleSpeaker, Audio: true}},
			DialogID: "committed", MaxCandidates: 3, Temperature: 0.7, Seed: 1, PCM: question,
			SystemPrompt: "You suggest short replies.",
		}
		t0 := time.Now()
		if _, err := pipe.Infer(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	speculative := func(ctx context.Context) <-chan time.Time {
		done := make(chan time.Time, 1)
		go func() {
			_, err := pipe.HearAhead(ctx, engine.Request{
				Messages: []engine.Message{{Role: engine.RoleDisabledPerson, Content: "Good morning."}, {Role: engine.RoleSpeaker, Audio: true}},
				DialogID: "speculative", MaxCandidates: 3, PCM: long, SystemPrompt: "You suggest short replies.",
			})
			if err != nil && engine.KindOf(err) != engine.KindCanceled {
				b.Errorf("speculative pass: %v", err)
			}
			done <- time.Now()
		}()
		return done
	}
	// The encoder's step: one window's encoder time over its steps (two
	// per layer, and the two convolutions).
	tr, err := stt.Transcribe(context.Background(), long, engine.TranscribeOptions{Threads: cores})
	if err != nil {
		b.Fatal(err)
	}
	step := tr.Encoder / time.Duration(2*stt.Info().HParams.NAudioLayer+2)
	committed() // warm up

	var alone, withSpec, yield []time.Duration
	b.ResetTimer()
	for range b.N {
		alone = append(alone, committed())

		// The speculative pass of another session starts first and is
		// well into its encoder when the committed turn arrives.
		ctx, cancel := context.WithCancel(context.Background())
		done := speculative(ctx)
		time.Sleep(tr.Encoder / 3)
		withSpec = append(withSpec, committed())
		<-done
		cancel()

		// The granularity alone: cancel it mid-encoder and time its return.
		ctx, cancel = context.WithCancel(context.Background())
		done = speculative(ctx)
		time.Sleep(tr.Encoder / 3)
		t0 := time.Now()
		cancel()
		yield = append(yield, (<-done).Sub(t0))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(med(alone), "alone-ms")
	b.ReportMetric(med(withSpec), "with-spec-ms")
	b.ReportMetric(med(withSpec)/med(alone), "ratio")
	b.ReportMetric(med(yield), "yield-ms")
	b.ReportMetric(float64(step)/float64(time.Millisecond), "encoder-step-ms")
	b.ReportMetric(float64(tr.Encoder)/float64(time.Millisecond), "encoder-ms")
}
