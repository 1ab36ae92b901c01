package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// TestSteerSimulations checks what each simulated user types for a reply.
func TestSteerSimulations(t *testing.T) {
	for _, c := range []struct {
		mode, reply string
		want        engine.Steer
		keys        int
	}{
		{"initials", "I would like tea.", engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}, 4},
		{"words", "I want to go to the bedroom", engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t", "g", "t", "t", "bedroom"}}, 6 + 7 + 1},
		{"prefix:5", "I would like tea", engine.Steer{Mode: engine.SteerPrefix, Prefix: "I wou"}, 5},
		{"replace", "I want coffee", engine.Steer{Mode: engine.SteerReplace, Text: "I want cqxj", Word: 2}, 1},
	} {
		sim, err := parseSteerSim(c.mode)
		if err != nil {
			t.Fatal(err)
		}
		s, keys, ok := sim.make(c.reply)
		if !ok || keys != c.keys || s.Mode != c.want.Mode || strings.Join(s.Words, ",") != strings.Join(c.want.Words, ",") ||
			s.Prefix != c.want.Prefix || s.Text != c.want.Text || s.Word != c.want.Word {
			t.Errorf("%s of %q: %+v, %d keys, ok %v; want %+v, %d keys", c.mode, c.reply, s, keys, ok, c.want, c.keys)
		}
		if c.mode != "replace" && !steer.Matches(s, steer.Clean(c.reply)) {
			t.Errorf("%s: the true reply %q does not meet %+v", c.mode, c.reply, s)
		}
	}
	for _, bad := range []string{"prefix:0", "prefix:x", "spell"} {
		if _, err := parseSteerSim(bad); err == nil {
			t.Errorf("--steer %s accepted", bad)
		}
	}
}

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
		Results []steerScore `json:"results"`
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
