// Package vad finds speech in 16 kHz mono recordings with Silero VAD v5,
// computed in Go from the weights of its ONNX file (silero.go, onnx.go), and
// turns the speech probabilities into segments and joined audio the way
// whisper.cpp does (segments.go). It compiles no C.
package vad

import (
	"context"

	"github.com/replyd/replyd/engine"
)

// Detector implements engine.SpeechFilter with a Model and whisper.cpp's
// parameters. It is safe for concurrent use.
type Detector struct {
	Model  *Model
	Params Params
}

// NewDetector returns a Detector with whisper.cpp's default parameters.
func NewDetector(m *Model) *Detector { return &Detector{Model: m, Params: DefaultParams()} }

// KeepSpeech returns the speech of pcm joined as whisper.cpp joins it, and
// the number of segments; no speech gives an empty Speech.
func (d *Detector) KeepSpeech(ctx context.Context, pcm []float32) (engine.Speech, error) {
	if err := ctx.Err(); err != nil {
		return engine.Speech{}, err
	}
	segs := Segments(d.Model.Probs(pcm), d.Params)
	return engine.Speech{PCM: Join(pcm, segs, d.Params), Segments: len(segs)}, nil
}

// KeepSpeechByProbs is KeepSpeech with the probabilities of pcm's windows
// already computed (a live turn's: engine.SpeechByProbs): the same
// segments and joining, without running the model again.
func (d *Detector) KeepSpeechByProbs(pcm, probs []float32) engine.Speech {
	segs := Segments(probs, d.Params)
	return engine.Speech{PCM: Join(pcm, segs, d.Params), Segments: len(segs)}
}

// Status describes the detector for /healthz and the admin page.
func (d *Detector) Status() engine.EngineStatus {
	return engine.EngineStatus{Name: "vad", Model: d.Model.Path(), Ready: true, Backend: "cpu"}
}

// NewVoiceStream starts a stream of Silero VAD over live audio
// (engine.VoiceDetector), from the zero State.
func (d *Detector) NewVoiceStream() engine.VoiceStream { return &stream{m: d.Model} }

// stream is one live stream's Silero state.
type stream struct {
	m  *Model
	st State
}

// Prob runs one window of WindowSamples samples.
func (s *stream) Prob(window []float32) float32 { return s.m.Prob(&s.st, window) }
