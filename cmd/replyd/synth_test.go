package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine/whisper"
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
	m, err := whisper.Load(path, whisper.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	st := m.Status()
	m.Close()
	if !strings.Contains(errOut.String(), "random weights") || !isDemoModel(path) || st.Model != path {
		t.Errorf("stderr %q, demo %v, status %+v", errOut.String(), isDemoModel(path), st)
	}
	for _, args := range [][]string{
		{"synth", "--shape", "tiny", "--dir", dir},
		{"synth", "--shape", "qwen2.5-0.5b", "--type", "q5_0", "--dir", dir},
		{"synth", "--dir", dir},
	} {
		if err := cmdModels(args, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
