package modelfile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAddDiskFillsTmpfs fills a real 256 KiB tmpfs with a 1 MiB upload of
// unknown size. It needs to mount one: as root, or in a user namespace
// (unshare -rm re-runs this test there); elsewhere it is skipped.
func TestAddDiskFillsTmpfs(t *testing.T) {
	if os.Getenv("MODELFILE_TMPFS_CHILD") == "" {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare(1) to mount a tmpfs")
		}
		cmd := exec.Command(unshare, "-rm", os.Args[0], "-test.run=^TestAddDiskFillsTmpfs$", "-test.v")
		cmd.Env = append(os.Environ(), "MODELFILE_TMPFS_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "unshare:") {
			t.Skipf("cannot make a mount namespace: %s", out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestAddDiskFillsTmpfs") {
			t.Fatalf("in a mount namespace: %v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, 0)
	file := append(validGGUF(), make([]byte, 1<<20)...)
	models := filepath.Join(dir, "models")
	_, err := Add(models, "big.gguf", bytes.NewReader(file), AddOptions{Size: -1})
	var ns *NoSpaceError
	if !errors.As(err, &ns) || !ns.Filled || ns.Written <= 0 || ns.Written >= int64(len(file)) || ns.Free < 200<<10 {
		t.Fatalf("Add = %v (%+v), want a filled NoSpaceError with the bytes written and ~256 KiB free again", err, ns)
	}
	if got := names(t, models); len(got) != 0 {
		t.Errorf("folder holds %q", got)
	}
	t.Log(err)
}
