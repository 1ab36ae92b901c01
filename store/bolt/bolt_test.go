package bolt

import (
	bolt "go.etcd.io/bbolt"
)

// boltTx lets tests reach into the file below the store's API.
type boltTx = bolt.Tx

// boltOpen opens a plain bbolt file.
func boltOpen(path string) (*bolt.DB, error) { return bolt.Open(path, 0o600, nil) }
