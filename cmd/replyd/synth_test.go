package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/testaudio"
)

// TestModelsSynth writes the smallest real shape, checks that it prints the
// path it wrote, that the file loads as that shape, and that replyd flags it
// as a demo model; shapes and types the writers do not have are refused.
func TestModelsSynth(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := cmdModels([]string{"synth", "--shape", "tiny.en", "--type", "q4_0", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	path := strings.TrimSpace(out.String())
	if path != filepath.Join(dir, "synth-tiny.en-q4_0.bin") {
		t.Fatalf("printed %q", out.String())
	}
	m, err := whisper.Load(path, whisper.Options{Threads: 1, NoFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	st := m.Status()
	// Its transcripts are made of the language models' words.
	tr, err := m.Transcribe(context.Background(), testaudio.Voiced(1, 16000), engine.TranscribeOptions{})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]bool{}
	for _, w := range llm.DemoWords() {
		words[w] = true
	}
	for _, w := range strings.Fields(tr.Text) {
		if !words[w] {
			t.Errorf("transcript word %q is not one of the language models' words (%q)", w, tr.Text)
			break
		}
	}
	if !strings.Contains(errOut.String(), "random weights") || !isDemoModel(path) || st.Model != path {
		t.Errorf("stderr %q, demo %v, status %+v", errOut.String(), isDemoModel(path), st)
	}
	for _, args := range [][]string{
		{"synth", "--shape", "medium", "--dir", dir},
		{"synth", "--shape", "qwen2.5-0.5b", "--type", "q5_0", "--dir", dir},
		{"synth", "--dir", dir},
		// The Qwen2.5 shapes are written with Qwen's tokenizer or not at all.
		{"synth", "--shape", "qwen2.5-0.5b", "--tokenizer", filepath.Join(dir, "absent.json"), "--dir", dir},
	} {
		if err := cmdModels(args, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestModelsSynthMultilingual: the multilingual shapes have the language
// tokens of OpenAI's multilingual vocabulary, and a transcription without a
// language detects one of them (random weights decide which).
func TestModelsSynthMultilingual(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := cmdModels([]string{"synth", "--shape", "tiny", "--type", "q4_0", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	path := strings.TrimSpace(out.String())
	m, err := whisper.Load(path, whisper.Options{Threads: 1, NoFallback: true, MaxTokensPerWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if info := m.Info(); !info.Multilingual || info.Languages != 99 || info.HParams.NVocab != 51865 || info.HParams.NAudioState != 384 {
		t.Fatalf("Info() = %+v", info)
	}
	if st := m.Status(); st.EnglishOnly {
		t.Errorf("a multilingual model reports English only: %+v", st)
	}
	tr, err := m.Transcribe(context.Background(), testaudio.Voiced(1, 16000), engine.TranscribeOptions{Language: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Language) < 2 || tr.Warning != "" {
		t.Errorf("detected language %q, warning %q", tr.Language, tr.Warning)
	}
}
