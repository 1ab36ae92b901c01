package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
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

// TestTranscribeAudioCtx: --audio-ctx sets the encoder's positions for
// audio of one window (the JSON says which), --window speech sizes it from
// the speech, and audio longer than one 30 s window is refused with a
// message that says so.
func TestTranscribeAudioCtx(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "whisper-demo.bin")
	if err := whisper.WriteDemoModel(model); err != nil {
		t.Fatal(err)
	}
	clip := func(name string, seconds float64) string {
		p := filepath.Join(dir, name)
		pcm := make([]float32, int(seconds*16000))
		for i := range pcm {
			pcm[i] = float32(0.1 * math.Sin(float64(i)*0.05))
		}
		if err := os.WriteFile(p, testaudio.Mono16(16000, pcm), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	short, long := clip("short.wav", 2), clip("long.wav", 31)
	run := func(args ...string) (map[string]any, error) {
		var out bytes.Buffer
		args = append([]string{"--model", model, "--no-vad", "--no-fallback", "--threads", "1", "--json"}, args...)
		if err := cmdTranscribe(context.Background(), args, &out, io.Discard); err != nil {
			return nil, err
		}
		var v map[string]any
		err := json.Unmarshal(out.Bytes(), &v)
		return v, err
	}
	for _, c := range []struct {
		args []string
		want float64
	}{
		{[]string{"--audio-ctx", "256", short}, 256},
		{[]string{"--window", "speech", short}, 164}, // ceil(2 × 50) + 64
		{[]string{"--window", "full", short}, 0},
		{[]string{short}, 500}, // auto, stock weights: max(10 s, 2 s + 2 s)
	} {
		v, err := run(c.args...)
		if err != nil || v["audio_ctx"] != c.want || v["text"] == "" {
			t.Errorf("%v: %v, %v; want audio_ctx %v", c.args, v, err, c.want)
		}
	}
	_, err := run("--audio-ctx", "256", long)
	if err == nil || !strings.Contains(err.Error(), "at most 30 s (one window)") {
		t.Errorf("--audio-ctx on 31 s: %v", err)
	}
	if v, err := run(long); err != nil || v["audio_ctx"] != float64(0) {
		t.Errorf("31 s without --audio-ctx: %v, %v", v, err)
	}
}
