package models

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const fetchScript = "../scripts/fetch-models.sh"

// scriptPins reads the PINS array of scripts/fetch-models.sh.
func scriptPins(t *testing.T) []Model {
	t.Helper()
	f, err := os.Open(fetchScript)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Model
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "PINS=(":
			in = true
		case in && line == ")":
			return out
		case in:
			fields := strings.Split(strings.Trim(line, `"`), "|")
			if len(fields) != 7 {
				t.Fatalf("pin line %q: %d fields, want 7", line, len(fields))
			}
			n, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				t.Fatalf("pin line %q: %v", line, err)
			}
			out = append(out, Model{Name: fields[0], File: fields[1], Bytes: n, SHA256: fields[3], SHA1: fields[4],
				Recommended: fields[5] == "yes", URL: fields[6]})
		}
	}
	t.Fatal("no PINS=( ... ) block in " + fetchScript)
	return nil
}

// TestFetchScriptMatchesManifest keeps the standalone download script and the
// embedded manifest from drifting apart.
func TestFetchScriptMatchesManifest(t *testing.T) {
	m, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var want []Model
	for _, e := range m.Models {
		want = append(want, Model{Name: e.Name, File: e.File, Bytes: e.Bytes, SHA256: e.SHA256, SHA1: e.SHA1,
			Recommended: e.Recommended, URL: e.URL})
	}
	if diff := cmp.Diff(want, scriptPins(t)); diff != "" {
		t.Errorf("scripts/fetch-models.sh PINS differ from manifest.json (-manifest +script):\n%s", diff)
	}
}

// TestFetchScriptRejectsImpostor runs the script offline (--from a local
// folder) on files that have a pinned name but other content: it must fail,
// say why, and leave nothing under the model's name.
func TestFetchScriptRejectsImpostor(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	m, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Find("whisper-base.en")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"wrong size": []byte("not a whisper model"),
		// Right size, wrong bytes: only the checksum can catch it.
		"right size": make([]byte, w.Bytes),
	} {
		t.Run(name, func(t *testing.T) {
			mirror, out := t.TempDir(), t.TempDir()
			mustWrite(t, mirror, w.File, content)
			cmd := exec.Command("bash", fetchScript, "--from", mirror, "--dir", out, w.Name)
			got, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("script accepted an impostor:\n%s", got)
			}
			if !strings.Contains(string(got), "REJECTED") {
				t.Errorf("output does not say the file was rejected:\n%s", got)
			}
			if _, err := os.Stat(filepath.Join(out, w.File)); !os.IsNotExist(err) {
				t.Errorf("an unverified file was given the model's name (stat: %v)", err)
			}
		})
	}
}

// TestFetchScriptLanguage: outside English the recommended set has the
// multilingual Whisper model instead of the English-only one (which would
// transcribe every language as English); in English it is base.en, with a
// hint at --language.
func TestFetchScriptLanguage(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	for lang, want := range map[string]string{"de": "whisper-small-q5_1", "AR": "whisper-small-q5_1", "en-GB": "whisper-base.en", "": "whisper-base.en"} {
		args := []string{fetchScript, "--dry-run"}
		if lang != "" {
			args = append(args, "--language", lang)
		}
		out, err := exec.Command("bash", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var whisper []string
		for _, line := range strings.Split(string(out), "\n") {
			if name, ok := strings.CutPrefix(line, "would fetch whisper-"); ok {
				whisper = append(whisper, "whisper-"+strings.SplitN(name, ":", 2)[0])
			}
		}
		if len(whisper) != 1 || whisper[0] != want {
			t.Errorf("--language %q fetches Whisper %v, want %s:\n%s", lang, whisper, want, out)
		}
		if hint := strings.Contains(string(out), "--language CODE"); hint != (want == "whisper-base.en") {
			t.Errorf("--language %q: hint at --language shown: %v\n%s", lang, hint, out)
		}
	}
}
