package modelfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/replyd/replyd/internal/testutil"
)

// TestAddDiskFills: a disk that fills while the file is copied, with a
// size announced or not, is a NoSpaceError with the bytes written and the
// bytes free, never ErrShort (a client's fault); another write error is
// neither; nothing is left in the folder.
func TestAddDiskFills(t *testing.T) {
	file := validGGUF()
	room := func(n int) func(io.Writer) io.Writer {
		return func(w io.Writer) io.Writer { return testutil.FillingDisk(w, n) }
	}
	free := func(string) (int64, error) { return 4096, nil }
	for _, c := range []struct {
		name string
		o    AddOptions
		want string
	}{
		{"chunked", AddOptions{Size: -1, Free: free, Writer: room(40)},
			"the models folder's disk filled after 40 bytes (1 KiB) of the file (its full size is unknown: it was sent without a Content-Length) were written; nothing was kept, and it has 4096 bytes (4 KiB) free"},
		{"announced", AddOptions{Size: int64(len(file)), Free: func(string) (int64, error) { return 1 << 40, nil }, Writer: room(100)},
			fmt.Sprintf("the models folder's disk filled after 100 bytes (1 KiB) of its %d (1 KiB) were written; nothing was kept, and it has 1099511627776 bytes (1024.0 GiB) free", len(file))},
		{"free unknown", AddOptions{Size: -1, Free: func(string) (int64, error) { return -1, nil }, Writer: room(0)},
			"the models folder's disk filled after 0 bytes (0 KiB) of the file (its full size is unknown: it was sent without a Content-Length) were written; nothing was kept, and its free space is unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Add(dir, "big.gguf", bytes.NewReader(file), c.o)
			var ns *NoSpaceError
			if !errors.As(err, &ns) || !ns.Filled || errors.Is(err, ErrShort) {
				t.Fatalf("Add = %v, want a filled NoSpaceError", err)
			}
			if err.Error() != c.want {
				t.Errorf("error\n %s\nwant\n %s", err, c.want)
			}
			if got := names(t, dir); len(got) != 0 {
				t.Errorf("folder holds %q", got)
			}
		})
	}
	dir := t.TempDir()
	eio := func(w io.Writer) io.Writer { return errWriter{syscall.EIO} }
	_, err := Add(dir, "big.gguf", bytes.NewReader(file), AddOptions{Size: -1, Free: free, Writer: eio})
	var ns *NoSpaceError
	if err == nil || errors.As(err, &ns) || errors.Is(err, ErrShort) || !errors.Is(err, syscall.EIO) {
		t.Errorf("a failing disk: %v, want the I/O error itself", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("folder holds %q", got)
	}
}

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }
