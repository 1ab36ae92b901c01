// Package shareddata finds the shared conformance data (../shared/testdata
// beside the clone, or $REPLYD_TESTDATA) for tests. Where the data is absent,
// as in a stranger's fresh clone, tests skip loudly; with
// REPLYD_REQUIRE_TESTDATA=1 (set by .ci/run) its absence fails them instead.
// A test that skips appends its name to the file $REPLYD_SKIP_LOG names, so
// that `make test` can say in its last line how many tests did not run.
//
// It is not called testdata: the go command leaves directories of that name
// out of ./..., so go vet and go test never saw the package.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/testaudio"
)

// Dir returns the directory holding the shared test data (the folder that
// contains whisper/), or skips or fails tb as described in the package doc.
func Dir(tb testing.TB) string {
	tb.Helper()
	if d := Find(); d != "" {
		return d
	}
	msg := "SHARED TEST DATA NOT FOUND: set REPLYD_TESTDATA or put shared/testdata beside the clone; conformance tests are NOT running"
	if os.Getenv("REPLYD_REQUIRE_TESTDATA") == "1" {
		tb.Fatal(msg)
	}
	logSkip(tb.Name())
	tb.Skip(msg)
	return ""
}

// Whisper returns Dir(tb)/whisper.
func Whisper(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(Dir(tb), "whisper")
}

// Find returns the shared test data directory or "" when there is none.
func Find() string {
	if d := os.Getenv("REPLYD_TESTDATA"); d != "" {
		if ok(d) {
			return d
		}
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	// Walk up to the module root (the directory with go.mod), then look
	// beside it.
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(filepath.Dir(dir), "shared", "testdata")
			if ok(d) {
				return d
			}
			return ""
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// logSkip appends name to $REPLYD_SKIP_LOG when it is set. Test binaries
// of several packages run at once: each line is one small O_APPEND write.
func logSkip(name string) {
	p := os.Getenv("REPLYD_SKIP_LOG")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(name + "\n")
}

func ok(d string) bool {
	st, err := os.Stat(filepath.Join(d, "whisper"))
	return err == nil && st.IsDir()
}

// JFK returns the samples of the shared data's whisper/audio/jfk.wav (16 kHz
// mono; "And so, my fellow Americans, ask not what your country can do for
// you, ask what you can do for your country."), skipping as Dir does when
// the data is missing.
func JFK(tb testing.TB) []float32 {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Whisper(tb), "audio", "jfk.wav"))
	if err != nil {
		tb.Fatal(err)
	}
	_, pcm, err := testaudio.ReadMono16(b)
	if err != nil {
		tb.Fatal(err)
	}
	return pcm
}
