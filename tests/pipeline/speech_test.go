package pipeline

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/engine/vad"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// countingSTT passes to the real Whisper model and keeps what it was given.
type countingSTT struct {
	engine.Transcriber
	mu    sync.Mutex
	calls int
	pcm   []float32
}

func (c *countingSTT) Transcribe(ctx context.Context, pcm []float32, opts engine.TranscribeOptions) (engine.Transcript, error) {
	c.mu.Lock()
	c.calls++
	c.pcm = pcm
	c.mu.Unlock()
	return c.Transcriber.Transcribe(ctx, pcm, opts)
}

// countingLLM counts the language model's calls.
type countingLLM struct {
	engine.Generator
	mu    sync.Mutex
	calls int
}

func (c *countingLLM) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Generator.Generate(ctx, req)
}

func speechPipeline(t *testing.T) (*engine.Pipeline, *countingSTT, *countingLLM) {
	m, err := vad.Load(shareddata.VADModel(t))
	if err != nil {
		t.Fatal(err)
	}
	s, l := engines(t)
	stt, lm := &countingSTT{Transcriber: s}, &countingLLM{Generator: l}
	return &engine.Pipeline{Decode: audio.Decode, STT: stt, LLM: lm, VAD: vad.NewDetector(m), MaxAudio: time.Minute}, stt, lm
}

func infer(t *testing.T, p *engine.Pipeline, wav []byte) (engine.Result, error) {
	return p.Infer(context.Background(), engine.Request{
		Messages: []engine.Message{{Role: engine.RoleSpeaker, Audio: true}}, Audio: wav, MaxCandidates: 2, Temperature: 0.7, Seed: 1,
	})
}

// TestPipelineNoSpeech: silence, noise and music-like tones hold no speech:
// no transcript, no_speech, no candidates, and neither Whisper nor the
// language model runs.
func TestPipelineNoSpeech(t *testing.T) {
	p, stt, lm := speechPipeline(t)
	r := rand.New(rand.NewPCG(5, 6))
	noise := make([]float32, 3*16000)
	for i := range noise {
		noise[i] = float32(0.1 * r.NormFloat64())
	}
	tones := make([]float32, 3*16000)
	for i := range tones {
		f := []float64{261.6, 329.6, 392, 523.3}[(i/4000)%4]
		tones[i] = float32(0.2 * math.Sin(2*math.Pi*f*float64(i)/16000) * math.Exp(-3*float64(i%4000)/4000))
	}
	for name, pcm := range map[string][]float32{"silence": make([]float32, 3*16000), "white noise": noise, "tones": tones} {
		t.Run(name, func(t *testing.T) {
			res, err := infer(t, p, testaudio.Mono16(16000, pcm))
			if err != nil {
				t.Fatal(err)
			}
			if !res.NoSpeech || res.Transcript != "" || len(res.Candidates) != 0 || !res.HasTranscript {
				t.Fatalf("no_speech %v, transcript %q, %d candidates", res.NoSpeech, res.Transcript, len(res.Candidates))
			}
		})
	}
	if stt.calls != 0 || lm.calls != 0 {
		t.Fatalf("Whisper ran %d times, the language model %d times, for recordings without speech", stt.calls, lm.calls)
	}
}

// TestPipelineTrailingSilence: speech followed by 2.5 s of silence reaches
// Whisper without the silence (only the speech and whisper.cpp's 30 ms of
// padding), so no tail can be hallucinated from it; replies are generated.
func TestPipelineTrailingSilence(t *testing.T) {
	p, stt, lm := speechPipeline(t)
	pcm := shareddata.Speak(t, "Would you like some tea?", "en-us", 0.3, 2.5, 0)
	res, err := infer(t, p, testaudio.Mono16(16000, pcm))
	if err != nil {
		t.Fatal(err)
	}
	if res.NoSpeech || len(res.Candidates) == 0 || stt.calls != 1 || lm.calls != 1 {
		t.Fatalf("no_speech %v, %d candidates, %d transcriptions, %d generations", res.NoSpeech, len(res.Candidates), stt.calls, lm.calls)
	}
	voice := float64(len(pcm))/16000 - 2.8 // espeak's own output, with its short silent edges
	got := float64(len(stt.pcm)) / 16000
	if got > voice+0.2 || got < voice-0.6 {
		t.Fatalf("Whisper got %.2f s of a %.2f s recording whose voice lasts about %.2f s", got, float64(len(pcm))/16000, voice)
	}
}

// TestPipelineTruncatedWAV: a WAV whose data chunk is shorter than its
// header says is refused as unsupported audio, never answered.
func TestPipelineTruncatedWAV(t *testing.T) {
	p, stt, lm := speechPipeline(t)
	wav := testaudio.Mono16(16000, make([]float32, 16000))
	for _, b := range [][]byte{wav[:len(wav)-32000], wav[:len(wav)-16000]} {
		res, err := infer(t, p, b)
		if engine.KindOf(err) != engine.KindUnsupportedAudio || len(res.Candidates) != 0 {
			t.Fatalf("%d bytes: %v (%d candidates), want unsupported audio", len(b), err, len(res.Candidates))
		}
	}
	if stt.calls != 0 || lm.calls != 0 {
		t.Fatal("a truncated recording reached the engines")
	}
}

// TestPipelineLiveTurnKeepsSpeechByItsProbs: a live turn's audio carries
// its windows' speech probabilities from the session's detector
// (Request.VoiceProbs); the speech stage keeps speech by them, not by a
// detector started afresh on the turn. Probabilities of silence over a
// spoken question keep nothing (no Whisper); the stream's own keep what
// KeepSpeech keeps of the same audio; a count that does not fit the audio
// is ignored and the audio detected again.
func TestPipelineLiveTurnKeepsSpeechByItsProbs(t *testing.T) {
	p, stt, _ := speechPipeline(t)
	m, err := vad.Load(shareddata.VADModel(t))
	if err != nil {
		t.Fatal(err)
	}
	q := shareddata.Speak(t, "Would you like some tea?", "en-us", 0.3, 0.8, 0)
	q = q[:len(q)/engine.VoiceWindow*engine.VoiceWindow]
	hear := func(probs []float32) (engine.Result, []float32) {
		t.Helper()
		stt.pcm = nil
		res, err := p.Infer(context.Background(), engine.Request{
			Messages: []engine.Message{{Role: engine.RoleSpeaker, Audio: true}}, PCM: q, VoiceProbs: probs, MaxCandidates: 1, Seed: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res, stt.pcm
	}
	calls := stt.calls
	if res, _ := hear(make([]float32, len(q)/engine.VoiceWindow)); !res.NoSpeech || stt.calls != calls {
		t.Errorf("probabilities of silence: no_speech %v, Whisper ran %d times", res.NoSpeech, stt.calls-calls)
	}
	want, err := vad.NewDetector(m).KeepSpeech(context.Background(), q)
	if err != nil || len(want.PCM) == 0 {
		t.Fatalf("KeepSpeech kept %d samples (%v)", len(want.PCM), err)
	}
	if _, heard := hear(m.Probs(q)); !slices.Equal(heard, want.PCM) {
		t.Errorf("by the stream's probabilities Whisper heard %d samples, KeepSpeech keeps %d", len(heard), len(want.PCM))
	}
	if _, heard := hear(make([]float32, 3)); !slices.Equal(heard, want.PCM) {
		t.Errorf("with a probability count that does not fit, Whisper heard %d samples, KeepSpeech keeps %d", len(heard), len(want.PCM))
	}
}
