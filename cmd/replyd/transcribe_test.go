package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// TestTranscribeVADAndFallbackFlags: `replyd transcribe` runs VAD by
// default, so 3 s of silence never reaches Whisper (no text, no_speech);
// --no-vad --no-fallback transcribes the whole recording greedily (the demo
// model's random weights turn the silence into tokens).
func TestTranscribeVADAndFallbackFlags(t *testing.T) {
	vadModel := shareddata.VADModel(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "whisper-demo.bin")
	if err := whisper.WriteDemoModel(model); err != nil {
		t.Fatal(err)
	}
	clip := filepath.Join(dir, "silence.wav")
	if err := os.WriteFile(clip, testaudio.Mono16(16000, make([]float32, 3*16000)), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) map[string]any {
		t.Helper()
		var out bytes.Buffer
		args = append([]string{"--model", model, "--vad-model", vadModel, "--threads", "1", "--json"}, append(args, clip)...)
		if err := cmdTranscribe(context.Background(), args, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := run()
	if v["no_speech"] != true || v["text"] != "" || v["speech_segments"] != float64(0) {
		t.Fatalf("with VAD: %v", v)
	}
	v = run("--no-vad", "--no-fallback")
	if v["no_speech"] != false || v["text"] == "" || v["speech_segments"] != nil {
		t.Fatalf("--no-vad --no-fallback: %v", v)
	}
}
