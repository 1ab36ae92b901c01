package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/engine/whisper"
)

func TestWhisperCompute(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	for _, c := range []struct {
		backend string
		layers  int
		gpu     func() bool
		want    string
	}{
		{"auto", -1, yes, whisper.ComputeGPU},
		{"auto", -1, no, whisper.ComputeBLAS},
		{"auto", 0, yes, whisper.ComputeBLAS},
		{"", 5, yes, whisper.ComputeGPU},
		{"cpu", -1, yes, whisper.ComputeBLAS},
		{"gpu", 0, no, whisper.ComputeGPU},
		{"ggml-cpu", -1, no, whisper.ComputeGGMLCPU},
	} {
		got, err := whisperCompute(c.backend, c.layers, c.gpu)
		if err != nil || got != c.want {
			t.Errorf("whisperCompute(%q, %d) = %q, %v; want %q", c.backend, c.layers, got, err, c.want)
		}
	}
	if _, err := whisperCompute("cuda", -1, yes); err == nil {
		t.Error("whisperCompute accepted an unknown backend")
	}
}

// TestWhisperPlacement: auto falls back to the CPU where the GPU cannot
// take speech, gpu does not; the language model's file size is left free
// on the GPU when its layers go there.
func TestWhisperPlacement(t *testing.T) {
	llm := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(llm, make([]byte, 12345), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		backend, compute string
		layers           int
		fallback         bool
		reserve          int64
	}{
		{"auto", whisper.ComputeGPU, -1, true, 12345},
		{"", whisper.ComputeGPU, 10, true, 12345},
		{"gpu", whisper.ComputeGPU, -1, false, 12345},
		{"gpu", whisper.ComputeGPU, 0, false, 0},
		{"auto", whisper.ComputeBLAS, -1, false, 0},
		{"ggml-cpu", whisper.ComputeGGMLCPU, -1, false, 0},
	} {
		cfg := &Config{WhisperBackend: c.backend, GPULayers: c.layers, LLMModel: llm}
		if fb, res := whisperPlacement(cfg, c.compute); fb != c.fallback || res != c.reserve {
			t.Errorf("whisperPlacement(%q, %s, layers %d) = %v, %d; want %v, %d", c.backend, c.compute, c.layers, fb, res, c.fallback, c.reserve)
		}
	}
}
