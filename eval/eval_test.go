package eval

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine/score"
)

// TestDialogs: the built-in set, an outcome export's lines without text
// skipped, and a malformed line's error naming the line and the field.
func TestDialogs(t *testing.T) {
	ds, name, skipped, err := Dialogs("")
	if err != nil || name != "built-in dialogs" || len(ds) != 36 || skipped != 0 {
		t.Fatalf("built-in: %d dialogs, %q, %d skipped, %v", len(ds), name, skipped, err)
	}
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "d.jsonl")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ds, _, skipped, err = Dialogs(write(`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":"Yes please.","inference_id":"inf_x","user":"p_1"}` + "\n\n" +
		`{"inference_id":"inf_y","outcome":"typed","at":"2026-01-02T03:04:05Z"}` + "\n"))
	if err != nil || len(ds) != 1 || skipped != 1 || ds[0].reply != "Yes please." || ds[0].line != 1 || ds[0].req.Messages[0].Content != "Tea?" {
		t.Errorf("an export: %+v, %d skipped, %v", ds, skipped, err)
	}
	for _, tc := range []struct{ content, want string }{
		{`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":"Yes"}` + "\n" + `{"messages":[{"role":"robot","content":"x"}],"reply":"y"}`, `line 2: messages[0].role must be "speaker" or "disabled_person"`},
		{`{"messages":[{"role":"speaker","content":"Tea?"}]}`, "line 1: reply is required"},
		{`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":7}`, "line 1: reply has the wrong type: expected a string"},
		{`{"messages":[{"role":"speaker","content":"Tea?"}],"reply":"  "}`, "line 1: reply must not be empty"},
		{"\n\n" + `{"messages":[`, "line 3: not a JSON object (syntax error at byte 13)"},
		{`[1]`, "line 1: not a JSON object (expected an object)"},
		{`{"reply":"yes"}`, "line 1: messages is required"},
		{`{"inference_id":"inf_y"}`, "holds no dialog with a reply"},
	} {
		if _, _, _, err := Dialogs(write(tc.content)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.content, err, tc.want)
		}
	}
}

// TestPrompts: files, the built-in prompt when none is given, and the
// checks that need no server.
func TestPrompts(t *testing.T) {
	ctx := context.Background()
	ps, err := Prompts(ctx, nil, nil, "", "", nil)
	if err != nil || len(ps) != 1 || ps[0].Name != "built-in" || ps[0].Text() != api.DefaultSystemPrompt {
		t.Fatalf("built-in: %+v, %v", ps, err)
	}
	dir := t.TempDir()
	f, empty := filepath.Join(dir, "short.txt"), filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(f, []byte("Be brief."), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ps, err := Prompts(ctx, []string{f}, nil, "", "", nil); err != nil || len(ps) != 1 || ps[0].Name != "file short.txt" || ps[0].Text() != "Be brief." {
		t.Errorf("a file: %+v, %v", ps, err)
	}
	for _, c := range []struct {
		files, versions []string
		server, key     string
		want            string
	}{
		{[]string{empty}, nil, "", "", "is empty"},
		{[]string{filepath.Join(dir, "gone.txt")}, nil, "", "", "--prompt-file"},
		{nil, []string{"v1"}, "", "", "--prompt-version needs --server URL"},
		{nil, []string{"v1"}, "http://127.0.0.1:1", "", "--server needs the admin key"},
		{nil, []string{"v1"}, "ftp://box", "k", "is not an http(s) URL"},
	} {
		if _, err := Prompts(ctx, c.files, c.versions, c.server, c.key, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c, err, c.want)
		}
	}
}

// TestPrint: a prompt's figures from its dialogs' ranking, as a table.
func TestPrint(t *testing.T) {
	var sum score.Ranking
	sum.Add(score.Rank([]string{"Yes please."}, "yes please"))
	sum.Add(score.Rank([]string{"No.", "Later"}, "later"))
	ps := []Prompt{{Name: "built-in", Result: result("built-in", sum, 2)}}
	if r := ps[0].Result; r.Top1Exact != 0.5 || r.TopNExact != 1 || r.KeystrokesTyped != 15 || r.Dialogs != 2 {
		t.Errorf("figures %+v", r)
	}
	var b bytes.Buffer
	if err := Print(&b, ps, 2, "m.gguf", true, "built-in dialogs", 1, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"replyd eval: 2 dialogs from built-in dialogs, 2 candidates each, model m.gguf", "1 outcome lines without text skipped",
		"a demo model", "top-2", "built-in    50.0%   100.0%      1.000  10 of 15 (66.7%)"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
}
