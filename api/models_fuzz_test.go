package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// FuzzAdminModels sends arbitrary model names and bodies to the model
// routes an admin acts with (activate, rollback, time, remove, compare and
// its progress): every answer
// is a documented status with an {error, message} body, never a 500, and no
// name reaches a file outside the models folder (a file beside the folder
// stays, the folder's own files stay unless a remove of exactly that name
// was answered 204).
func FuzzAdminModels(f *testing.F) {
	for _, s := range []struct {
		name, body string
		route      uint8
	}{
		{"b.gguf", ``, 0}, {"b.gguf", `{"mode":"swap"}`, 0}, {"b.gguf", `{"mode":"x"}`, 0}, {"b.gguf", `{"kind":"whisper"}`, 0},
		{"a.gguf", `{}`, 0}, {"llm", ``, 1}, {"whisper", `{"mode":"beside"}`, 1}, {"x", `[`, 1},
		{"b.gguf", ``, 2}, {"cut.gguf", ``, 2}, {"b.gguf", ``, 3}, {"a.gguf", ``, 3},
		{"../outside.gguf", ``, 3}, {"..", ``, 0}, {".gguf", ``, 2}, {"a.gguf\x00", "\x00", 0},
		{"%2e%2e%2foutside.gguf", ``, 3}, {"b.bin", `{"mode":1}`, 0},
		{"b.gguf", `{"turns":5}`, 4}, {"b.gguf", `{"turns":-1,"temperature":9}`, 4}, {"b.gguf", `{"turns":1e99}`, 4},
		{"a.gguf", ``, 4}, {"b.gguf", ``, 5}, {"../outside.gguf", ``, 5},
	} {
		f.Add(s.name, []byte(s.body), s.route)
	}
	root := f.TempDir()
	dir := filepath.Join(root, "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	outside := filepath.Join(root, "outside.gguf")
	if err := os.WriteFile(outside, tinyGGUF("outside"), 0o644); err != nil {
		f.Fatal(err)
	}
	files := map[string][]byte{"a.gguf": tinyGGUF("a.gguf"), "b.gguf": tinyGGUF("b.gguf"), "cut.gguf": tinyGGUF("cut")[:100]}
	a := filepath.Join(dir, "a.gguf")
	tm := &fakeSwitcher{fakeHealth: &fakeHealth{}, active: map[string]string{"llm": a}}
	e := newEnv(f, withModels(dir, tm, timingLMs(a)))
	f.Fuzz(func(t *testing.T, name string, body []byte, route uint8) {
		// Each input starts from the same folder and active model.
		for n, b := range files {
			if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tm.mu.Lock()
		tm.active = map[string]string{"llm": a}
		tm.mu.Unlock()
		method, path := "POST", "/v1/admin/models/"+url.PathEscape(name)
		switch route % 6 {
		case 0:
			path += "/activate"
		case 1:
			path += "/rollback"
		case 2:
			path += "/time"
		case 3:
			method, body = "DELETE", nil
		case 4:
			path += "/compare"
		case 5:
			method, path, body = "GET", path+"/compare", nil
		}
		req := httptest.NewRequest(method, "http://box.test/", bytes.NewReader(body))
		req.URL.Path, req.URL.RawPath = "", ""
		if u, err := url.Parse(path); err == nil {
			req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
		} else {
			return // not a request line a client could send
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderAdminKey, testAdminKey)
		rec := e.do(req)
		switch rec.Code {
		case 200, 204, 400, 404, 405, 409, 413, 422, 429, 503:
		default:
			t.Fatalf("%s %s: status %d: %s", method, path, rec.Code, rec.Body)
		}
		var eb errorBody
		if rec.Code >= 300 && (json.Unmarshal(rec.Body.Bytes(), &eb) != nil || eb.Error == "" || eb.Message == "") {
			t.Fatalf("%s %s: %d without an error body: %s", method, path, rec.Code, rec.Body)
		}
		if _, err := os.Stat(outside); err != nil {
			t.Fatalf("%s %s reached outside the models folder: %v", method, path, err)
		}
		for n := range files {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil && !(method == "DELETE" && name == n && rec.Code == 204) {
				t.Fatalf("%s %s (%d) removed %s", method, path, rec.Code, n)
			}
		}
	})
}
