package main

import (
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
