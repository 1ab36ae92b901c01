//go:build unix

package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/replyd/replyd/store"
)

// lockFile takes the same exclusive flock bbolt takes on path, so that
// Restore cannot replace a file a running replyd has open. A missing file
// needs no lock. The returned function releases the lock.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: restore to %s: %w", path, describeIOError(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store: restore to %s: %w (stop the running replyd first)", path, store.ErrLocked)
		}
		return nil, fmt.Errorf("store: restore to %s: lock: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
