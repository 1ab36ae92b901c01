package modelfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brokenReader yields some bytes, then fails like a dropped connection.
type brokenReader struct{ r io.Reader }

func (b *brokenReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestAddListRemove(t *testing.T) {
	file := validGGUF()
	sum := sha256.Sum256(file)
	hexSum := hex.EncodeToString(sum[:])
	man := testManifest{hexSum: "Tiny q0"}
	lots := func(string) (int64, error) { return 1 << 40, nil }
	dir := filepath.Join(t.TempDir(), "models")
	for _, c := range []struct {
		name    string
		file    string
		src     io.Reader
		o       AddOptions
		wantErr string
		is      error
		left    []string // the folder afterwards
	}{
		{"ok", "tiny.gguf", bytes.NewReader(file), AddOptions{Size: int64(len(file)), Free: lots, Manifest: man}, "", nil, []string{"tiny.gguf"}},
		{"same again", "tiny.gguf", bytes.NewReader(file), AddOptions{Size: -1, Free: lots, Manifest: man}, "", nil, []string{"tiny.gguf"}},
		{"other bytes same name", "tiny.gguf", bytes.NewReader((&ggufBuilder{noTmpl: true}).build()), AddOptions{Size: -1, Free: lots},
			"already in the folder", ErrExists, []string{"tiny.gguf"}},
		{"bad name", "../x.gguf", bytes.NewReader(file), AddOptions{Size: -1}, "invalid model file name", ErrBadName, []string{"tiny.gguf"}},
		{"no space", "b.gguf", bytes.NewReader(file), AddOptions{Size: 1 << 30, Free: func(string) (int64, error) { return 1 << 29, nil }},
			"needs 1140850688 bytes (1.1 GiB) of free disk space and the models folder's disk has 536870912 (512.0 MiB)", nil, []string{"tiny.gguf"}},
		{"too large announced", "b.gguf", bytes.NewReader(file), AddOptions{Size: 5000, MaxBytes: 100}, "larger than allowed", ErrTooLarge, []string{"tiny.gguf"}},
		{"too large streamed", "b.gguf", bytes.NewReader(file), AddOptions{Size: -1, MaxBytes: 100, Free: lots}, "larger than allowed", ErrTooLarge, []string{"tiny.gguf"}},
		{"dropped", "b.gguf", &brokenReader{bytes.NewReader(file[:100])}, AddOptions{Size: int64(len(file)), Free: lots}, "unexpected EOF", nil, []string{"tiny.gguf"}},
		{"short", "b.gguf", bytes.NewReader(file[:100]), AddOptions{Size: int64(len(file)), Free: lots}, "got 100 bytes of", nil, []string{"tiny.gguf"}},
		{"refused", "b.gguf", bytes.NewReader(file[:len(file)-8]), AddOptions{Size: -1, Free: lots}, "truncated: tensor 1", ErrInvalid, []string{"tiny.gguf"}},
		{"zeros", "z.bin", bytes.NewReader(make([]byte, 1<<16)), AddOptions{Size: -1, Free: lots}, "not a GGUF or whisper.cpp ggml file", ErrInvalid, []string{"tiny.gguf"}},
		{"whisper", "w.bin", bytes.NewReader(whisperFile(nil)), AddOptions{Size: -1, Free: lots}, "", nil, []string{"tiny.gguf", "w.bin"}},
	} {
		e, err := Add(dir, c.file, c.src, c.o)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: error %v is not %v", c.name, err, c.is)
		}
		if got := strings.Join(names(t, dir), " "); got != strings.Join(c.left, " ") {
			t.Errorf("%s: folder holds %q, want %q", c.name, got, strings.Join(c.left, " "))
		}
		if c.name == "ok" && (e.SHA256 != hexSum || e.Manifest != "known: Tiny q0" || e.Check != "ok" || e.Kind != KindLLM) {
			t.Errorf("ok: entry %+v", e)
		}
	}
	var nsErr *NoSpaceError
	if _, err := Add(dir, "c.gguf", bytes.NewReader(file), AddOptions{Size: 10, Free: func(string) (int64, error) { return 5, nil }}); !errors.As(err, &nsErr) || nsErr.Need != 10+spareBytes {
		t.Errorf("no space: %v", err)
	}

	active := func(n string) bool { return n == "w.bin" }
	list, err := List(dir, man, active)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].File != "tiny.gguf" || list[0].Manifest != "known: Tiny q0" || list[0].Active ||
		list[1].File != "w.bin" || list[1].Kind != KindWhisper || list[1].Manifest != "not in the manifest" || !list[1].Active {
		t.Errorf("list %+v", list)
	}
	if err := Remove(dir, "w.bin", active); !errors.Is(err, ErrActive) {
		t.Errorf("remove active: %v", err)
	}
	if err := Remove(dir, "nope.bin", active); !errors.Is(err, ErrNotFound) {
		t.Errorf("remove missing: %v", err)
	}
	if err := Remove(dir, "tiny.gguf", active); err != nil {
		t.Errorf("remove: %v", err)
	}
	if got := strings.Join(names(t, dir), " "); got != "w.bin" {
		t.Errorf("after remove: %q", got)
	}
	// A file refused after it was put in the folder by hand is listed
	// with what is wrong.
	os.WriteFile(filepath.Join(dir, "cut.gguf"), file[:len(file)-8], 0o600)
	os.WriteFile(filepath.Join(dir, tempPrefix+"123"), file, 0o600)
	list, _ = List(dir, man, nil)
	if len(list) != 2 || !strings.Contains(list[0].Check, "truncated: tensor 1") || list[0].Kind != "" {
		t.Errorf("list %+v", list)
	}
	Sweep(dir)
	if got := strings.Join(names(t, dir), " "); got != "cut.gguf w.bin" {
		t.Errorf("after sweep: %q", got)
	}
}

func TestValidName(t *testing.T) {
	for n, want := range map[string]bool{"a.gguf": true, "ggml-base.en.bin": true, "a_b-1.gguf": true,
		"": false, ".x.gguf": false, "a/b.gguf": false, "..": false, "a.txt": false, "a b.gguf": false, "é.gguf": false} {
		if ValidName(n) != want {
			t.Errorf("ValidName(%q) = %v", n, !want)
		}
	}
}

// testManifest knows files by SHA-256: sum -> name.
type testManifest map[string]string

func (m testManifest) Known(sum string) (string, bool) { n, ok := m[sum]; return n, ok }
