package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestModelsSteps: `replyd models steps` prints a step time for every
// context and number of sequences and, with --greedy, that many tokens of
// the greedy continuation, each with a lead that is not negative.
func TestModelsSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the language model")
	}
	dir := t.TempDir()
	demoModelsIn(t, dir)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"models", "steps", "--model", filepath.Join(dir, "llm-demo.gguf"), "--threads", "1",
		"--seqs", "2", "--contexts", "20,40", "--rounds", "1", "--gpu-layers", "0", "--greedy", "3"}, os.Getenv, &out, &errOut)
	var js struct {
		Context []int     `json:"context"`
		StepUS  [][]int64 `json:"step_us"`
		Greedy  []struct {
			Token  int     `json:"token"`
			Margin float32 `json:"margin"`
		} `json:"greedy"`
	}
	if code != 0 || json.Unmarshal(out.Bytes(), &js) != nil {
		t.Fatalf("models steps: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if len(js.Context) != 2 || len(js.StepUS) != 2 || len(js.StepUS[1]) != 3 || js.StepUS[1][2] <= 0 {
		t.Errorf("steps: %s", out.String())
	}
	if len(js.Greedy) != 3 {
		t.Fatalf("greedy: %s", out.String())
	}
	for _, g := range js.Greedy {
		if g.Margin < 0 {
			t.Errorf("greedy token %+v has a negative lead", g)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"models", "steps", "--model", filepath.Join(dir, "llm-demo.gguf"), "--contexts", "40,20"},
		os.Getenv, &out, &errOut); code == 0 {
		t.Error("shrinking contexts were accepted")
	}
}
