package bolt

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// eachJSON calls fn, in key order, with every key of b that starts with
// prefix (nil: every key) and its value decoded from JSON; a bucket that
// is missing (nil: older files opened read-only) has none. what names the
// record in a decoding error. The key is valid only during fn.
func eachJSON[T any](b *bolt.Bucket, prefix []byte, what string, fn func(k []byte, v T) error) error {
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var rec T
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("store: decode %s: %w", what, err)
		}
		if err := fn(k, rec); err != nil {
			return err
		}
	}
	return nil
}

// listJSON is the values eachJSON walks, in key order; never nil.
func listJSON[T any](b *bolt.Bucket, prefix []byte, what string) ([]T, error) {
	out := []T{}
	err := eachJSON(b, prefix, what, func(_ []byte, v T) error {
		out = append(out, v)
		return nil
	})
	return out, err
}

// deleteKeys deletes keys from b and returns how many.
func deleteKeys(b *bolt.Bucket, keys [][]byte) (int, error) {
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}
