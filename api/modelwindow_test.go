package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/testutil"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// fakeWindowSetter is engines whose loaded Whisper model is active: what
// SetShortWindow was given for it.
type fakeWindowSetter struct {
	mu     sync.Mutex
	active string
	got    []bool
}

func (f *fakeWindowSetter) SetShortWindow(path string, short bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != f.active {
		return false
	}
	f.got = append(f.got, short)
	return true
}

// TestAdminModelWindow: a Whisper file's window declaration, made with the
// upload or later, is stored with the file's records, listed in windows
// (the default for a file without one), given to the loaded model when it
// is that file, and forgotten when the file is replaced; bad requests are
// 400 with the field named, a language model's file is refused, a
// missing file is 404.
func TestAdminModelWindow(t *testing.T) {
	dir := modelsFolder(t, "a.gguf")
	whisper := testutil.WhisperFile(nil)
	if err := os.WriteFile(filepath.Join(dir, "v.bin"), whisper, 0o644); err != nil {
		t.Fatal(err)
	}
	ws := &fakeWindowSetter{active: filepath.Join(dir, "v.bin")}
	e := newEnv(t, func(o *Options) {
		o.Models = models.NewService(models.ServiceOptions{Dir: dir, Node: o.Node, Store: o.Store, Log: o.Logger, Now: o.Now,
			ShortWindowDefault: true, Windows: ws})
	})
	e.srv.models.FreeSpace = func(string) (int64, error) { return 1 << 30, nil }
	at := e.clock.Now().UTC().Format(time.RFC3339)

	for _, c := range []struct {
		name   string
		method string
		path   string
		body   string
		status int
		want   string
	}{
		{"no body", "PUT", "/v1/admin/models/v.bin/window", "", 400, errJSON(CodeInvalidRequest, "a JSON request body is required")},
		{"no field", "PUT", "/v1/admin/models/v.bin/window", `{}`, 400, errJSON(CodeInvalidRequest,
			"short_window is required: true when the weights are made for a short window (FUTO's acft fine-tunes), false for stock weights")},
		{"not a bool", "PUT", "/v1/admin/models/v.bin/window", `{"short_window":"yes"}`, 400, errJSON(CodeInvalidRequest,
			"short_window has the wrong type: expected a boolean")},
		{"bad name", "PUT", "/v1/admin/models/.x/window", `{"short_window":true}`, 400, errJSON(CodeInvalidRequest,
			"the model file name must be letters, digits, '.', '_' and '-', ending in .gguf or .bin")},
		{"missing", "PUT", "/v1/admin/models/nope.bin/window", `{"short_window":true}`, 404, errJSON(CodeNotFound, "no such model file: nope.bin")},
		{"language model", "PUT", "/v1/admin/models/a.gguf/window", `{"short_window":true}`, 400, errJSON(CodeInvalidRequest,
			"only a Whisper model file has an encoder window to declare: a.gguf is not a checked Whisper file")},
		{"declared, active", "PUT", "/v1/admin/models/v.bin/window", `{"short_window":false}`, 200,
			`{"file":"v.bin","short_window":false,"source":"declared","at":"` + at + `","active":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantJSON(t, e.do(adminReq(c.method, c.path, c.body)), c.status, c.want)
		})
	}
	if len(ws.got) != 1 || ws.got[0] {
		t.Errorf("the loaded model was given %v, want [false]", ws.got)
	}

	// Uploads: the parameter is checked before a byte is read.
	for _, c := range []struct {
		name, target string
		body         []byte
		status       int
		want         string
	}{
		{"bad value", "w.bin&short_window=yes", whisper, 400, errJSON(CodeInvalidRequest, "?short_window= must be true or false")},
		{"twice", "w.bin&short_window=true&short_window=false", whisper, 400, errJSON(CodeInvalidRequest, "?short_window= must be true or false")},
		{"gguf name", "b.gguf&short_window=true", tinyGGUF("b"), 400, errJSON(CodeInvalidRequest,
			"?short_window= applies only to a Whisper model file (.bin); b.gguf is a language model's name")},
		{"gguf in a .bin", "g.bin&short_window=false", tinyGGUF("g"), 422, errJSON(CodeInvalidModel,
			"the model file was refused: ?short_window= applies only to a Whisper model file and g.bin is a llm file")},
	} {
		t.Run("upload "+c.name, func(t *testing.T) {
			wantJSON(t, e.do(uploadReq(c.target, c.body)), c.status, c.want)
		})
	}
	for _, n := range []string{"w.bin", "b.gguf", "g.bin"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("a refused upload left %s: %v", n, err)
		}
	}
	rec := e.do(uploadReq("w.bin&short_window=true", whisper))
	var up struct {
		File   string          `json:"file"`
		Kind   string          `json:"kind"`
		Window json.RawMessage `json:"window"`
	}
	decode(t, rec, &up)
	if rec.Code != 201 || up.File != "w.bin" || up.Kind != "whisper" || string(up.Window) != `{"short_window":true,"source":"declared","at":"`+at+`"}` {
		t.Errorf("upload with a declaration: %d %s", rec.Code, rec.Body)
	}

	listed := func() map[string]*models.WindowDeclaration {
		t.Helper()
		var l struct {
			Windows map[string]*models.WindowDeclaration `json:"windows"`
		}
		rec := e.do(adminReq("GET", "/v1/admin/models", ""))
		decode(t, rec, &l)
		return l.Windows
	}
	got := listed()
	if len(got) != 2 || !got["w.bin"].ShortWindow || got["w.bin"].Source != models.WindowDeclared ||
		got["v.bin"].ShortWindow || got["v.bin"].Source != models.WindowDeclared {
		t.Errorf("windows = %+v %+v", got["w.bin"], got["v.bin"])
	}
	// The declaration is the loaded model's at a load or a switch too.
	if d, err := e.srv.models.WindowOf(filepath.Join(dir, "w.bin")); err != nil || !d.ShortWindow || d.Source != models.WindowDeclared {
		t.Errorf("WindowOf(w.bin) = %+v, %v", d, err)
	}
	// A file replaced since is another file: the default applies again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "v.bin"), later, later); err != nil {
		t.Fatal(err)
	}
	if got := listed()["v.bin"]; got == nil || !got.ShortWindow || got.Source != models.WindowDefault || !got.At.IsZero() {
		t.Errorf("v.bin replaced: %+v, want the default (true)", got)
	}
	if d, err := e.srv.models.WindowOf(filepath.Join(dir, "v.bin")); err != nil || d.Source != models.WindowDefault {
		t.Errorf("WindowOf(v.bin replaced) = %+v, %v", d, err)
	}
	// A removed file's declaration goes with its other records.
	if rec := e.do(adminReq("DELETE", "/v1/admin/models/w.bin", "")); rec.Code != 204 {
		t.Fatalf("remove: %d %s", rec.Code, rec.Body)
	}
	recs, err := e.st.ModelRecords("box-test")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.File == "w.bin" {
			t.Errorf("record of the removed file: %+v", r)
		}
	}

	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName == store.StreamAdmin && strings.Contains(l.Message, "window") {
			msgs = append(msgs, l.Level+" "+l.Message)
		}
	}
	want := []string{
		"info model window declared: v.bin: stock weights (auto keeps the stock window rule)",
		"warn model upload refused: g.bin: it is a llm file and ?short_window= applies only to Whisper files",
		"info model window declared: w.bin: weights made for a short window (auto sizes the window to the speech)",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("admin log:\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}
