package fault

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// startupLimit bounds how long replyd may take to refuse a data directory it
// cannot use: the store opens before anything slow.
const startupLimit = 15 * time.Second

// expectStartupError starts replyd on dataDir and expects it to exit
// non-zero within startupLimit, with output naming the data file or
// directory and containing every phrase in want (case-insensitive).
func expectStartupError(t *testing.T, dataDir string, want ...string) {
	t.Helper()
	p := startProc(t, replydproc.Options{DataDir: dataDir})
	code := p.WaitExit(startupLimit)
	out := p.Output()
	if code == 0 {
		t.Fatalf("replyd exited 0 on an unusable data directory:\n%s", out)
	}
	if !strings.Contains(out, dataDir) {
		t.Errorf("the error does not name the data directory %s:\n%s", dataDir, out)
	}
	for _, w := range want {
		if !strings.Contains(strings.ToLower(out), strings.ToLower(w)) {
			t.Errorf("the error does not say %q:\n%s", w, out)
		}
	}
}

// mountTmpfs mounts a tmpfs at dir with the given options, or skips the test
// saying why; it is unmounted at the end of the test.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("SKIP: mounting a tmpfs needs root (this test runs as uid %d)", os.Geteuid())
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot mount a tmpfs here (%v: %s); this check needs CAP_SYS_ADMIN", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// TestReadOnlyDataDir: a data directory on a read-only file system (as
// root, chmod would not stop replyd, so the file system itself is made
// read-only) must stop start-up with a clear message.
func TestReadOnlyDataDir(t *testing.T) {
	t.Run("read-only tmpfs", func(t *testing.T) {
		dir := t.TempDir()
		mountTmpfs(t, dir, "ro,size=1m")
		expectStartupError(t, dir, "read-only")
	})
	t.Run("not writable by the user", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("SKIP: root bypasses file modes; the read-only tmpfs case covers root")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		expectStartupError(t, dir, "permission denied")
	})
	t.Run("parent is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "not-a-dir")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectStartupError(t, filepath.Join(file, "data"), "not a directory")
	})
}

// TestFullDataDir: a data directory on a full file system must stop
// start-up with a clear message, not leave a half-written data file that a
// later start trips over.
func TestFullDataDir(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, dir, "size=64k")
	// Fill the file system to the last block.
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	expectStartupError(t, dir, "no space left")
}

// TestSecondInstance: a second replyd on the data directory of a running one
// must fail fast, say that the data file is locked, and leave the first one
// serving.
func TestSecondInstance(t *testing.T) {
	data := t.TempDir()
	first := startProc(t, replydproc.Options{DataDir: data})
	first.WaitReady()

	second := startProc(t, replydproc.Options{DataDir: data, AdminKey: first.AdminKey})
	start := time.Now()
	code := second.WaitExit(10 * time.Second)
	t.Logf("second instance exited %d after %s", code, time.Since(start).Round(time.Millisecond))
	out := second.Output()
	if code == 0 {
		t.Fatalf("second instance exited 0:\n%s", out)
	}
	if !strings.Contains(strings.ToLower(out), "locked") || !strings.Contains(out, data) {
		t.Errorf("second instance's error does not say that %s is locked:\n%s", data, out)
	}
	first.Must(replydproc.Request{Method: "GET", Path: "/healthz"}, 200)
	first.Stop()
}
