package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// TestModelWindowEndToEnd runs the real program: the admin's window
// declaration of the active Whisper file changes the window rule the
// loaded model uses at once (the Status view's window); a second file
// declared made for a short window is loaded with it at a switch; after a
// restart the box loads the file with its stored declaration, and a file
// without one gets REPLYD_WHISPER_SHORT_WINDOW's default.
func TestModelWindowEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test starts the real binary")
	}
	const adminKey = "e2e-admin-key-window-0123456789"
	env, folder := modelsFolderEnv(t, adminKey)
	env["REPLYD_NODE_NAME"] = "box-window"
	if err := whisper.WriteDemoModel(filepath.Join(folder, "whisper-two.bin")); err != nil {
		t.Fatal(err)
	}
	admin := map[string]string{"X-ADMIN-KEY": adminKey}
	const short, stock = "weights made for a short window", "stock weights"
	window := func(p *testutil.Replyd) string {
		t.Helper()
		var st struct {
			Engines []struct{ Name, Model, Window string }
		}
		if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/status", Header: admin}, 200), &st); err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Engines {
			if e.Name == "stt" {
				return filepath.Base(e.Model) + ": " + e.Window
			}
		}
		t.Fatalf("no stt engine in %+v", st.Engines)
		return ""
	}
	expect := func(p *testutil.Replyd, file, rule, when string) {
		t.Helper()
		if got := window(p); !strings.HasPrefix(got, file+": ") || !strings.Contains(got, rule) {
			t.Errorf("%s: the stt engine's window is %q, want %s with %q", when, got, file, rule)
		}
	}

	p := startReplyd(t, env)
	expect(p, "whisper-demo.bin", stock, "at the start, nothing declared")
	got := p.JSON("PUT", "/v1/admin/models/whisper-demo.bin/window", admin, map[string]any{"short_window": true}, 200)
	if got["active"] != true || got["source"] != "declared" || got["short_window"] != true {
		t.Errorf("declaring the active file: %v", got)
	}
	expect(p, "whisper-demo.bin", short, "after declaring the active file")
	p.JSON("PUT", "/v1/admin/models/whisper-two.bin/window", admin, map[string]any{"short_window": false}, 200)
	p.JSON("POST", "/v1/admin/models/whisper-two.bin/activate", admin, nil, 200)
	expect(p, "whisper-two.bin", stock, "after a switch to a file declared stock")
	p.JSON("POST", "/v1/admin/models/whisper/rollback", admin, nil, 200)
	expect(p, "whisper-demo.bin", short, "after rolling back to the file declared short")

	// A restart loads the chosen file with its stored declaration; the
	// default covers a file without one.
	p.Stop()
	env["REPLYD_WHISPER_SHORT_WINDOW"] = "on"
	p = startReplyd(t, env)
	expect(p, "whisper-demo.bin", short, "after a restart")
	p.JSON("PUT", "/v1/admin/models/whisper-demo.bin/window", admin, map[string]any{"short_window": false}, 200)
	expect(p, "whisper-demo.bin", stock, "declared stock over the default on")
	var list struct {
		Windows map[string]struct {
			ShortWindow bool `json:"short_window"`
			Source      string
		}
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Path: "/v1/admin/models", Header: admin}, 200), &list); err != nil {
		t.Fatal(err)
	}
	if w := list.Windows["whisper-demo.bin"]; w.ShortWindow || w.Source != "declared" {
		t.Errorf("listed whisper-demo.bin: %+v", w)
	}
	if w := list.Windows["whisper-two.bin"]; w.ShortWindow || w.Source != "declared" {
		t.Errorf("listed whisper-two.bin: %+v", w)
	}
	adminLog := string(p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=admin&limit=100", Header: admin}, 200))
	if !strings.Contains(adminLog, "model window declared: whisper-demo.bin: weights made for a short window") {
		t.Errorf("admin log lacks the declaration:\n%s", adminLog)
	}
}
