package pipeline

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// multilingualSTT writes and loads a multilingual Whisper model with random
// weights (the demo model's size, n_vocab 51865 with the 99 language
// tokens, as `replyd models synth --shape tiny` writes at tiny's size).
func multilingualSTT(t *testing.T) *whisper.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), "whisper-ml.bin")
	if err := whisper.WriteModel(path, whisper.Multilingual(whisper.DemoConfig())); err != nil {
		t.Fatal(err)
	}
	m, err := whisper.Load(path, whisper.Options{Threads: 1, MaxTokensPerWindow: 8, Demo: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if !m.Info().Multilingual {
		t.Fatal("the model is not multilingual")
	}
	return m
}

// TestPipelineDetectsTheLanguage: a German sentence spoken by espeak-ng,
// sent with no language to a multilingual Whisper model, is transcribed in
// the language Whisper detects (random weights decide which: this checks
// the plumbing, not the detection), which the transcript callback, the
// result and every candidate report and the language model is asked to
// reply in. With reply_language de (a tablet whose user speaks German) the
// prompt asks for German replies after the partner's words, whatever the
// partner's language, and the system message does not change.
func TestPipelineDetectsTheLanguage(t *testing.T) {
	stt := multilingualSTT(t)
	_, l := engines(t)
	rec := &recordingLLM{Generator: l}
	p := &engine.Pipeline{Decode: audio.Decode, STT: stt, LLM: rec, MaxAudio: 20 * time.Second}
	wav := testaudio.Mono16(16000, shareddata.Speak(t, "Guten Morgen! Möchtest du einen Kaffee oder lieber einen Tee?", "de", 0.2, 0.3, 0))
	infer := func(profile engine.Profile) (engine.Result, engine.Heard) {
		t.Helper()
		var heard engine.Heard
		res, err := p.Infer(context.Background(), engine.Request{
			Messages: []engine.Message{
				{Role: engine.RoleDisabledPerson, Content: "Hallo."},
				{Role: engine.RoleSpeaker, Audio: true},
			},
			Profile:       profile,
			Audio:         wav,
			MaxCandidates: 2, Temperature: 0.7, Seed: 3,
			OnTranscript: func(h engine.Heard) { heard = h },
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.NoSpeech || len(res.Candidates) == 0 {
			t.Fatalf("no_speech %v, %d candidates", res.NoSpeech, len(res.Candidates))
		}
		return res, heard
	}

	res, heard := infer(engine.Profile{Language: ""})
	detected := res.TranscriptLanguage
	t.Logf("detected %q (random weights), transcript %q", detected, res.Transcript)
	if len(detected) < 2 || len(detected) > 3 || res.TranscriptWarning != "" {
		t.Fatalf("transcript language %q, warning %q", detected, res.TranscriptWarning)
	}
	if heard != (engine.Heard{Transcript: res.Transcript, Language: detected}) {
		t.Errorf("the transcript callback got %+v", heard)
	}
	if rec.last.ReplyLanguage != detected || rec.last.Messages[1].Content != res.Transcript {
		t.Errorf("the language model was asked for %q replies to %q", rec.last.ReplyLanguage, rec.last.Messages[1].Content)
	}
	for _, c := range res.Candidates {
		if c.Language != detected {
			t.Errorf("candidate language %q, want the detected %q", c.Language, detected)
		}
	}
	system := systemPart(t, rec.last)

	res, _ = infer(engine.Profile{Language: "auto", ReplyLanguage: "de"})
	if res.TranscriptLanguage != detected {
		t.Errorf("the same recording was detected as %q, then %q", detected, res.TranscriptLanguage)
	}
	if rec.last.ReplyLanguage != "de" {
		t.Fatalf("reply_language de: the language model was asked for %q", rec.last.ReplyLanguage)
	}
	for _, c := range res.Candidates {
		if c.Language != "de" {
			t.Errorf("candidate language %q, want de", c.Language)
		}
	}
	prompt, err := l.PromptText(rec.last)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prompt, strings.TrimSpace(res.Transcript)+"\n[Reply in German (Deutsch).]") {
		t.Errorf("the prompt does not ask for German after the partner's words:\n%s", prompt)
	}
	if systemPart(t, rec.last) != system {
		t.Error("the system message changed with the reply language")
	}
}

// systemPart is the system message of req's prompt, up to the first turn.
func systemPart(t *testing.T, req engine.GenerateRequest) string {
	t.Helper()
	_, l := engines(t)
	prompt, err := l.PromptText(req)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(prompt, "Hallo.")
	if i < 0 {
		t.Fatalf("no first turn in the prompt:\n%s", prompt)
	}
	return prompt[:i]
}
