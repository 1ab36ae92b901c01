//go:build unix

package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

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

// sharedLock takes a shared flock on path, as a read-only bbolt open does,
// waiting up to timeout while a writer holds it (then ErrLocked). It
// returns the open file, nil when path does not exist; the caller closes it,
// which releases the lock (bbolt's own lock on another descriptor would
// conflict with it, so release it before bbolt opens the file).
func sharedLock(path string, timeout time.Duration) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("store: %s: %w (another replyd process holds it; stop it or choose another data directory)", path, store.ErrLocked)
			}
			return nil, fmt.Errorf("store: lock %s: %w", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
