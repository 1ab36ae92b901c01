package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/models"
)

// timingAudioSeconds is the length of the fixed audio a Whisper model is
// timed on.
const timingAudioSeconds = 4

// TimeModel implements models.Timer: it loads the file path of kind
// beside the active model, only when both fit in memory (models.PlanSwitch's
// rule), times it and the active model at PrioritySpeculative, so that any
// request goes first, and frees it. One model action (a switch or a
// timing) runs at a time.
func (e *engines) TimeModel(ctx context.Context, kind, path string) (models.Timing, error) {
	a, release, err := e.beginModelAction(kind, path)
	if err != nil {
		return models.Timing{}, err
	}
	defer release()
	name := a.name
	plan, err := a.plan("beside")
	out := models.Timing{BytesNeeded: plan.BytesNeeded, BytesAvailable: plan.BytesAvailable}
	if err != nil {
		return out, fmt.Errorf("%w: %s", models.ErrTimeNoRoom, models.TimeRoomReason(plan, a.availErr, a.gpu))
	}
	out.Reason = fmt.Sprintf("the model needs about %d MiB and %d MiB are available: it was timed beside the active one", plan.BytesNeeded>>20, plan.BytesAvailable>>20)
	log := e.log.With("timing", filepath.Base(path))
	t0 := time.Now()
	if name == "llm" {
		err = e.timeLLM(path, &out)
	} else {
		err = e.timeWhisper(ctx, path, &out)
	}
	out.LoadMS = time.Since(t0).Milliseconds()
	if err != nil {
		return out, err
	}
	log.Info("model timed", "kind", kind, "model", path, "ms", out.LoadMS)
	return out, nil
}

// timeLLM opens the candidate language model with the active one's
// settings and Options.Idle: Open's own timings (the decode steps for the
// configured candidates, the prompt speed and with it the history budget)
// run at PrioritySpeculative. The active model's figures are those its
// Open measured.
func (e *engines) timeLLM(path string, out *models.Timing) error {
	opts, err := llmOptions(e.cfg, path, e.cpu, e.log.With("timing", filepath.Base(path)))
	if err != nil {
		return err
	}
	opts.Idle = true
	cand, err := llm.Open(opts)
	if err != nil {
		return loadError("llm", err)
	}
	defer cand.Close()
	act, release, err := e.llm.Acquire()
	if err != nil {
		return errors.New("the active language model is unloaded")
	}
	defer release()
	out.Candidate = llmFigures(cand.Figures())
	out.Active = llmFigures(act.Figures())
	out.Active.Model = act.Status().Model
	return nil
}

func llmFigures(f llm.Figures) models.Figures {
	return models.Figures{PromptTokensPerS: math.Round(f.PromptTokensPerS*10) / 10, Candidates: f.Candidates,
		StepMS: math.Round(float64(f.Step.Microseconds())/10) / 100, HistoryBudgetTokens: f.HistoryBudget, MaxReplyTokens: f.MaxReplyTokens}
}

// timeWhisper loads the candidate Whisper model and transcribes the fixed
// audio with it and with the active model, each at idle priority.
func (e *engines) timeWhisper(ctx context.Context, path string, out *models.Timing) error {
	cand, err := openWhisper(e.cfg, path, e.shortWindow(path), e.log.With("timing", filepath.Base(path)))
	if err != nil {
		return loadError("stt", err)
	}
	defer cand.Close()
	pcm := timingAudio()
	d, err := e.timeTranscription(ctx, cand, pcm)
	if err != nil {
		return err
	}
	out.Candidate = sttFigures(d)
	out.Candidate.Window = cand.Status().Window
	act, release, err := e.stt.Acquire()
	if err != nil {
		return errors.New("the active speech-to-text model is unloaded")
	}
	defer release()
	if d, err = e.timeTranscription(ctx, act, pcm); err != nil {
		return err
	}
	out.Active = sttFigures(d)
	out.Active.Model, out.Active.Window = act.Status().Model, act.Status().Window
	return nil
}

func sttFigures(d time.Duration) models.Figures {
	ms := float64(d.Microseconds()) / 1000
	return models.Figures{AudioSeconds: timingAudioSeconds, TranscribeMS: math.Round(ms*10) / 10,
		RealTimeFactor: math.Round(ms/(timingAudioSeconds*1000)*1000) / 1000}
}

// timeTranscription transcribes pcm twice with m at idle priority (the
// first warms its weights) and returns the second's time.
func (e *engines) timeTranscription(ctx context.Context, m *whisper.Model, pcm []float32) (time.Duration, error) {
	var d time.Duration
	for range 2 {
		var err error
		if d, err = e.idleTranscription(ctx, m, pcm); err != nil {
			return 0, err
		}
	}
	return d, nil
}

// idleTranscription is one pass at PrioritySpeculative
// (engine.Scheduler.BeginSpeculativeTranscription): between the encoder's
// steps it gives its cores to any request that waits for them, and the time
// spent giving way is not counted. It is not stopped when a request comes
// (a live turn's speculative pass is): under steady traffic a stopped
// timing would start again forever; a transcription that comes meanwhile
// waits for the speech engine's turn at most this pass of
// timingAudioSeconds of audio.
func (e *engines) idleTranscription(ctx context.Context, m *whisper.Model, pcm []float32) (time.Duration, error) {
	threads, grow, end, err := e.cpu.BeginSpeculativeTranscription(ctx, func() {})
	if err != nil {
		return 0, err
	}
	defer end()
	var mu sync.Mutex
	var waited time.Duration
	timed := func(most int) int {
		t := time.Now()
		n := grow(most)
		mu.Lock()
		waited += time.Since(t)
		mu.Unlock()
		return n
	}
	t0 := time.Now()
	if _, err := m.Transcribe(ctx, pcm, engine.TranscribeOptions{Threads: threads, Grow: timed}); err != nil {
		return 0, err
	}
	return time.Since(t0) - waited, nil
}

// timingAudio is timingAudioSeconds of a fixed voiced sound at 16 kHz: a
// 140 Hz tone with its harmonics, rising and falling like syllables, so
// that the encoder and the decoder both run as on speech.
func timingAudio() []float32 {
	const rate = 16000
	pcm := make([]float32, timingAudioSeconds*rate)
	for i := range pcm {
		t := float64(i) / rate
		env := 0.5 + 0.5*math.Sin(2*math.Pi*3*t)
		var v float64
		for h := 1; h <= 5; h++ {
			v += math.Sin(2*math.Pi*140*float64(h)*t) / float64(h)
		}
		pcm[i] = float32(0.1 * env * v)
	}
	return pcm
}
