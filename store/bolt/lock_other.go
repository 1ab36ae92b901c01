//go:build !unix

package bolt

// lockFile is a no-op where flock is unavailable; replyd ships for Linux.
func lockFile(string) (func(), error) { return func() {}, nil }
