package disk

import (
	"errors"
	"os"
	"runtime"
	"testing"
)

func TestFree(t *testing.T) {
	n, err := Free(t.TempDir())
	if runtime.GOOS != "linux" {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Free off Linux: %d, %v; want errors.ErrUnsupported", n, err)
		}
		return
	}
	if err != nil || n <= 0 {
		t.Fatalf("Free(a temporary folder) = %d, %v; want a positive size", n, err)
	}
	if _, err := Free("/nonexistent/replyd-disk-test"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Free of a missing path: %v, want ErrNotExist", err)
	}
}
