// Package fault runs the real replyd binary through the failures an
// appliance meets (kill -9 mid-write, a read-only or full data directory, a
// second instance on the same data) and through the security properties the
// API promises (OTP lockout, revoked keys, admin-only endpoints, size limits,
// no path traversal, no secrets or dialog text in the log output).
//
// The binary is $REPLYD_BIN when set; otherwise TestMain builds ./cmd/replyd
// with the cgo flags of scripts/cgo-env.sh (the Makefile's flags, so the
// build cache is shared and llama.cpp is not rebuilt). Every server listens
// on 127.0.0.1 only; internal/replydproc runs them.
package fault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

var (
	replydBin string // the binary under test
	demoDir   string // llm-demo.gguf and whisper-demo.bin
	repoRoot  string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	repoRoot, err = filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "replyd-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	defer os.RemoveAll(tmp)

	ctx := context.Background()
	replydBin = os.Getenv("REPLYD_BIN")
	if replydBin == "" {
		replydBin = filepath.Join(tmp, "replyd")
		fmt.Fprintln(os.Stderr, "fault: building ./cmd/replyd (set REPLYD_BIN to use a built binary)")
		if err := replydproc.Build(ctx, repoRoot, replydBin, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return 1
		}
	} else if replydBin, err = filepath.Abs(replydBin); err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	demoDir = filepath.Join(tmp, "models")
	if err := replydproc.DemoModels(ctx, replydBin, demoDir); err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	return m.Run()
}

// startProc starts `replyd serve` (the binary under test, on the demo
// models) with o's data directory, admin key and environment. It does not
// wait for readiness: see WaitReady.
func startProc(t *testing.T, o replydproc.Options) *testutil.Replyd {
	t.Helper()
	o.Bin, o.Models = replydBin, demoDir
	return testutil.StartReplyd(t, o)
}
