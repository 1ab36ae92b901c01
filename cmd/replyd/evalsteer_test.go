package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/eval"
)

// TestEvalSteer runs `replyd eval --steer` on the built-in dialogs with the
// demo model: both contexts, every dialog steered.
func TestEvalSteer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the language model")
	}
	dir := t.TempDir()
	demoModelsIn(t, dir)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"eval", "--llm-model", filepath.Join(dir, "llm-demo.gguf"), "--threads", "1", "-n", "2", "--steer", "initials", "--json"},
		func(string) string { return "" }, &out, &errOut)
	var js struct {
		Results []eval.SteerScore `json:"results"`
	}
	if code != 0 || json.Unmarshal(out.Bytes(), &js) != nil || len(js.Results) != 2 {
		t.Fatalf("eval --steer: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, r := range js.Results {
		if r.Steer != "initials" || r.Dialogs != 36 || r.Chars == 0 || r.Actions == 0 {
			t.Errorf("result %+v", r)
		}
	}
	if !js.Results[0].Context || js.Results[1].Context {
		t.Errorf("contexts: %+v", js.Results)
	}
	out.Reset()
	if code := run(context.Background(), []string{"eval", "--steer", "spell"}, func(string) string { return "" }, &out, &out); code == 0 || !strings.Contains(out.String(), "--steer must be initials, words, prefix:N or replace") {
		t.Errorf("eval --steer spell: exit %d %s", code, out.String())
	}
}
