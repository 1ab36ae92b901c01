//go:build !linux

package disk

import "errors"

// Free is unknown off Linux: it returns errors.ErrUnsupported, and its
// callers treat the free space as unknown (/healthz leaves free_bytes out,
// a model upload skips the space check and a full disk shows as a failed
// write).
func Free(string) (int64, error) { return 0, errors.ErrUnsupported }
