package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModelsAdd brings the demo models in with `replyd models add` (so the
// pure-Go checker is held to the files engine/llm and engine/whisper load),
// and refuses a file cut in a tensor and a 2 GB sparse file of zeros,
// leaving nothing behind.
func TestModelsAdd(t *testing.T) {
	src := t.TempDir()
	if err := writeDemoModels(src); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	llmFile := filepath.Join(src, filepath.Base(DefaultLLMModel))
	whFile := filepath.Join(src, filepath.Base(DefaultWhisperModel))
	b, _ := os.ReadFile(whFile)
	cut := filepath.Join(src, "cut.bin")
	os.WriteFile(cut, b[:len(b)-1000], 0o600)
	zeros := filepath.Join(src, "zeros.gguf")
	f, err := os.Create(zeros)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		file, want string
		ok         bool
	}{
		{llmFile, "(llm, llama, ", true},
		{whFile, "(whisper, whisper, ", true},
		{cut, "invalid model file: at byte", false},
		{zeros, "not a GGUF or whisper.cpp ggml file", false},
	} {
		var out, errb bytes.Buffer
		err := cmdModels([]string{"add", "--data-dir", data, c.file}, &out, &errb)
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		got := out.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.file, got, c.want)
		}
	}
	des, _ := os.ReadDir(modelsDir(data))
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	if got := strings.Join(names, " "); got != "llm-demo.gguf whisper-demo.bin" {
		t.Errorf("folder holds %q", got)
	}
	var out bytes.Buffer
	if err := cmdModels([]string{"list", "--data-dir", data}, &out, &out); err != nil || strings.Count(out.String(), "not in the manifest  ok") != 2 {
		t.Errorf("list: %v %q", err, out.String())
	}
}
