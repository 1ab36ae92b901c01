package models

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
)

// timingAudioSeconds is the length of the fixed audio a Whisper model is
// timed on.
const timingAudioSeconds = 4

// Time times the model file path of kind ("llm" or "whisper") on this box
// beside the active model of its kind, without switching: it loads it,
// only when both fit in memory (PlanSwitch's rule), times it and the
// active model at PrioritySpeculative, so that any request goes first, and
// frees it. One model action (a switch, a timing or a comparison) runs at
// a time. Errors wrap ErrBusy, ErrTimeNoRoom, ErrUnusable or
// ErrNotSupported.
func (s *Service) Time(ctx context.Context, kind, path string) (Timing, error) {
	if !s.CanTime() {
		return Timing{}, ErrNotSupported
	}
	a, release, err := s.beginAction(kind, path)
	if err != nil {
		return Timing{}, err
	}
	defer release()
	plan, err := a.plan("beside")
	out := Timing{BytesNeeded: plan.BytesNeeded, BytesAvailable: plan.BytesAvailable}
	if err != nil {
		return out, fmt.Errorf("%w: %s", ErrTimeNoRoom, TimeRoomReason(plan, a.availErr, a.state.GPU))
	}
	out.Reason = fmt.Sprintf("the model needs about %d MiB and %d MiB are available: it was timed beside the active one", plan.BytesNeeded>>20, plan.BytesAvailable>>20)
	log := s.log.With("timing", filepath.Base(path))
	t0 := s.now()
	if a.name == "llm" {
		err = s.timeLLM(path, &out)
	} else {
		err = s.timeWhisper(ctx, path, &out)
	}
	out.LoadMS = s.now().Sub(t0).Milliseconds()
	if err != nil {
		return out, err
	}
	log.Info("model timed", "kind", kind, "model", path, "ms", out.LoadMS)
	return out, nil
}

// timeLLM opens the candidate language model with the active one's
// settings at idle priority (LanguageModels.OpenIdle: its own timings, the
// decode steps for the configured candidates, the prompt speed and with it
// the history budget, run at PrioritySpeculative). The active model's
// figures are those its opening measured.
func (s *Service) timeLLM(path string, out *Timing) error {
	cand, err := s.llm.OpenIdle(path)
	if err != nil {
		return loadError(err)
	}
	defer cand.Close()
	act, release, err := s.llm.Active()
	if err != nil {
		return errors.New("the active language model is unloaded")
	}
	defer release()
	out.Candidate = llmFigures(cand.Figures())
	out.Active = llmFigures(act.Figures())
	out.Active.Model = act.Status().Model
	return nil
}

func llmFigures(f LLMFigures) Figures {
	return Figures{PromptTokensPerS: math.Round(f.PromptTokensPerS*10) / 10, Candidates: f.Candidates,
		StepMS: math.Round(float64(f.Step.Microseconds())/10) / 100, HistoryBudgetTokens: f.HistoryBudget, MaxReplyTokens: f.MaxReplyTokens}
}

// timeWhisper loads the candidate Whisper model and transcribes the fixed
// audio with it and with the active model, each at idle priority.
func (s *Service) timeWhisper(ctx context.Context, path string, out *Timing) error {
	cand, err := s.stt.Open(path)
	if err != nil {
		return loadError(err)
	}
	defer cand.Close()
	pcm := timingAudio()
	d, err := s.timeTranscription(ctx, cand, pcm)
	if err != nil {
		return err
	}
	out.Candidate = sttFigures(d)
	out.Candidate.Window = cand.Status().Window
	act, release, err := s.stt.Active()
	if err != nil {
		return errors.New("the active speech-to-text model is unloaded")
	}
	defer release()
	if d, err = s.timeTranscription(ctx, act, pcm); err != nil {
		return err
	}
	out.Active = sttFigures(d)
	out.Active.Model, out.Active.Window = act.Status().Model, act.Status().Window
	return nil
}

func sttFigures(d time.Duration) Figures {
	ms := float64(d.Microseconds()) / 1000
	return Figures{AudioSeconds: timingAudioSeconds, TranscribeMS: math.Round(ms*10) / 10,
		RealTimeFactor: math.Round(ms/(timingAudioSeconds*1000)*1000) / 1000}
}

// timeTranscription transcribes pcm twice with m at idle priority (the
// first warms its weights) and returns the second's time.
func (s *Service) timeTranscription(ctx context.Context, m engine.Transcriber, pcm []float32) (time.Duration, error) {
	var d time.Duration
	for range 2 {
		var err error
		if d, err = s.idleTranscription(ctx, m, pcm); err != nil {
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
func (s *Service) idleTranscription(ctx context.Context, m engine.Transcriber, pcm []float32) (time.Duration, error) {
	threads, grow, end, err := s.cpu.BeginSpeculativeTranscription(ctx, func() {})
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
