//go:build !unix

package bolt

import (
	"os"
	"time"
)

// lockFile is a no-op where flock is unavailable; replyd ships for Linux.
func lockFile(string) (func(), error) { return func() {}, nil }

// sharedLock opens path without a lock where flock is unavailable; nil
// when path does not exist.
func sharedLock(path string, _ time.Duration) (*os.File, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	return f, err
}
