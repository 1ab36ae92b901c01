// Package models is replyd's models feature: the model files replyd
// recommends (the manifest) and the checks of files on disk against it,
// and the types, errors and rules of switching, timing and comparing the
// models a box runs (switch.go, timing.go, compare.go, plan.go). api
// parses requests and maps these errors; cmd/replyd's engines implement
// Switcher, Timer and Comparer.
//
// The manifest: models describes the model files replyd recommends and checks
// files on disk against that list. The list is the embedded manifest.json: one
// entry per file with where to get it, how big it is and its checksum. The
// checksums come from the publishers (see README.md); this package never
// downloads anything, so the appliance can verify a copied models folder
// offline.
package models

import (
	"bytes"
	"crypto/sha1" // whisper.cpp publishes SHA-1 for its ggml files: a second pin
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed manifest.json
var manifestJSON []byte

// Kinds of model.
const (
	KindWhisper = "whisper"
	KindLLM     = "llm"
	KindVAD     = "vad" // voice activity detection (Silero VAD)
	// KindTokenizer is a tokenizer without weights: Qwen's tokenizer.json,
	// which `replyd models synth` writes into the Qwen2.5 shapes.
	KindTokenizer = "tokenizer"
)

// Model is one recommended file.
type Model struct {
	Name string `json:"name"`
	File string `json:"file"` // base name in the models folder
	URL  string `json:"url"`
	// SHA256 is the lowercase hex SHA-256 of the whole file. Empty when no
	// published value exists; SHA1 is then the only pin (whisper.cpp's list).
	SHA256 string `json:"sha256"`
	SHA1   string `json:"sha1,omitempty"`
	// Bytes is the exact size, 0 when unknown.
	Bytes       int64  `json:"bytes"`
	Kind        string `json:"kind"`
	License     string `json:"license"`
	Recommended bool   `json:"recommended"`
	Notes       string `json:"notes"`
}

// Manifest is the parsed manifest.json.
type Manifest struct {
	Schema  int     `json:"schema"`
	Comment string  `json:"comment,omitempty"`
	Models  []Model `json:"models"`
}

// Status is the outcome of checking one file.
type Status string

// Statuses of a Result.
const (
	// StatusOK: the file is present and matches every published pin.
	StatusOK Status = "ok"
	// StatusMismatch: the file is present but its size or checksum differs.
	StatusMismatch Status = "mismatch"
	// StatusMissing: a manifest entry has no file in the folder. This is
	// normal for models the operator chose not to install.
	StatusMissing Status = "missing"
	// StatusUnknown: a file in the folder is not in the manifest (a demo
	// model, a model of the operator's own choice, a partial download).
	StatusUnknown Status = "not in manifest"
	// StatusUnpinned: the file is in the manifest but the manifest has no
	// checksum for it, so it cannot be verified.
	StatusUnpinned Status = "unpinned"
)

// Result is the check of one file or one manifest entry.
type Result struct {
	Name   string // manifest name; empty for StatusUnknown
	File   string // base name
	Kind   string
	Status Status
	// Bytes is the size found on disk (0 when missing).
	Bytes int64
	// SHA256 is the checksum computed from the file on disk, empty when the
	// file was not hashed (missing, or rejected on size before hashing).
	SHA256 string
	// Detail explains a mismatch in words: which pin differed.
	Detail string
}

// OK reports whether r is acceptable: the file matches, or is absent, or is
// not ours to judge. Missing and unknown files are fine: an appliance holds
// only the models it uses, and may hold models of the operator's choosing.
// A present file that differs from its pins, or that has no pin, is not.
func (r Result) OK() bool {
	return r.Status != StatusMismatch && r.Status != StatusUnpinned
}

// String is one line for `replyd models verify`.
func (r Result) String() string {
	label := r.File
	if r.Name != "" {
		label += " (" + r.Name + ")"
	}
	switch r.Status {
	case StatusOK:
		return fmt.Sprintf("ok               %s: %d bytes, sha256 %s", label, r.Bytes, r.SHA256)
	case StatusMissing:
		return fmt.Sprintf("missing          %s", label)
	case StatusUnknown:
		return fmt.Sprintf("not in manifest  %s: %d bytes, not checked", label, r.Bytes)
	case StatusUnpinned:
		return fmt.Sprintf("UNPINNED         %s: %s", label, r.Detail)
	default:
		return fmt.Sprintf("MISMATCH         %s: %s", label, r.Detail)
	}
}

// Failed reports whether any result is not OK.
func Failed(results []Result) bool {
	for _, r := range results {
		if !r.OK() {
			return true
		}
	}
	return false
}

// Embedded returns the manifest compiled into the binary.
func Embedded() (Manifest, error) {
	return ParseManifest(bytes.NewReader(manifestJSON))
}

// ParseManifest reads and validates a manifest: names and files unique,
// files plain base names, kinds known, checksums well-formed hex.
func ParseManifest(r io.Reader) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("models: parse manifest: %w", err)
	}
	names := map[string]bool{}
	files := map[string]bool{}
	for i, e := range m.Models {
		switch {
		case e.Name == "" || e.File == "":
			return Manifest{}, fmt.Errorf("models: manifest entry %d: name and file are required", i)
		case names[e.Name]:
			return Manifest{}, fmt.Errorf("models: manifest: duplicate name %q", e.Name)
		case files[e.File]:
			return Manifest{}, fmt.Errorf("models: manifest: duplicate file %q", e.File)
		case e.File != filepath.Base(e.File) || strings.HasPrefix(e.File, "."):
			return Manifest{}, fmt.Errorf("models: manifest: file %q must be a plain file name", e.File)
		case e.Kind != KindWhisper && e.Kind != KindLLM && e.Kind != KindVAD && e.Kind != KindTokenizer:
			return Manifest{}, fmt.Errorf("models: manifest: %s: kind %q is not %q, %q, %q or %q", e.Name, e.Kind, KindWhisper, KindLLM, KindVAD, KindTokenizer)
		case !isHex(e.SHA256, sha256.Size):
			return Manifest{}, fmt.Errorf("models: manifest: %s: sha256 must be empty or %d hex digits", e.Name, 2*sha256.Size)
		case !isHex(e.SHA1, sha1.Size):
			return Manifest{}, fmt.Errorf("models: manifest: %s: sha1 must be empty or %d hex digits", e.Name, 2*sha1.Size)
		case e.Bytes < 0:
			return Manifest{}, fmt.Errorf("models: manifest: %s: negative size", e.Name)
		}
		names[e.Name] = true
		files[e.File] = true
	}
	return m, nil
}

func isHex(s string, n int) bool {
	if s == "" {
		return true
	}
	if len(s) != 2*n || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Verify checks the regular files directly inside dir against the embedded
// manifest. See VerifyManifest.
func Verify(dir string) ([]Result, error) {
	m, err := Embedded()
	if err != nil {
		return nil, err
	}
	return VerifyManifest(dir, m)
}

// VerifyManifest hashes every regular file directly inside dir that the
// manifest names and compares size and checksums; it reports manifest entries
// without a file as StatusMissing and files the manifest does not name as
// StatusUnknown (those are not hashed). Hidden files and subdirectories are
// skipped. Results come in manifest order, then unknown files by name. The
// error is for a folder that cannot be read, or a named file that cannot be
// opened or read; a content difference is a Result, not an error.
func VerifyManifest(dir string, m Manifest) ([]Result, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("models: read %s: %w", dir, err)
	}
	present := map[string]os.DirEntry{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		present[e.Name()] = e
	}
	var out []Result
	for _, mod := range m.Models {
		r := Result{Name: mod.Name, File: mod.File, Kind: mod.Kind}
		if _, ok := present[mod.File]; !ok {
			r.Status = StatusMissing
			out = append(out, r)
			continue
		}
		delete(present, mod.File)
		if err := check(filepath.Join(dir, mod.File), mod, &r); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	var unknown []string
	for name := range present {
		unknown = append(unknown, name)
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		r := Result{File: name, Status: StatusUnknown}
		if info, err := present[name].Info(); err == nil {
			r.Bytes = info.Size()
		}
		out = append(out, r)
	}
	return out, nil
}

// check fills r for a file the manifest names.
func check(path string, mod Model, r *Result) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	r.Bytes = info.Size()
	if mod.SHA256 == "" && mod.SHA1 == "" {
		r.Status = StatusUnpinned
		r.Detail = "the manifest has no checksum for this file"
		return nil
	}
	if mod.Bytes > 0 && info.Size() != mod.Bytes {
		r.Status = StatusMismatch
		r.Detail = fmt.Sprintf("size %d bytes, expected %d", info.Size(), mod.Bytes)
		return nil
	}
	h256 := sha256.New()
	var h1 hash.Hash
	w := io.Writer(h256)
	if mod.SHA1 != "" {
		h1 = sha1.New()
		w = io.MultiWriter(h256, h1)
	}
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("models: read %s: %w", path, err)
	}
	r.SHA256 = hex.EncodeToString(h256.Sum(nil))
	var bad []string
	if mod.SHA256 != "" && r.SHA256 != mod.SHA256 {
		bad = append(bad, fmt.Sprintf("sha256 %s, expected %s", r.SHA256, mod.SHA256))
	}
	if h1 != nil {
		if got := hex.EncodeToString(h1.Sum(nil)); got != mod.SHA1 {
			bad = append(bad, fmt.Sprintf("sha1 %s, expected %s", got, mod.SHA1))
		}
	}
	if len(bad) > 0 {
		r.Status = StatusMismatch
		r.Detail = strings.Join(bad, "; ")
		return nil
	}
	r.Status = StatusOK
	return nil
}

// ErrNoModel is returned by Find when the manifest has no such name.
var ErrNoModel = errors.New("models: no such model in the manifest")

// Find returns the manifest entry with the given name.
func (m Manifest) Find(name string) (Model, error) {
	for _, e := range m.Models {
		if e.Name == name {
			return e, nil
		}
	}
	return Model{}, fmt.Errorf("%w: %q", ErrNoModel, name)
}

// Known returns the name of the model whose file has the SHA-256 sum; it
// implements modelfile.Manifest.
func (m Manifest) Known(sum string) (string, bool) {
	for _, e := range m.Models {
		if e.SHA256 != "" && e.SHA256 == sum {
			return e.Name, true
		}
	}
	return "", false
}
