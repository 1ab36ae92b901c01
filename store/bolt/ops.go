package bolt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the whole file to w from one read
// transaction (bbolt's Tx.WriteTo), while writers go on. It returns the bytes
// written. The copy is a valid data file for Restore. The read transaction
// lasts as long as writing to w does: pages freed meanwhile are not reused
// until it ends, and once the file outgrows the 1 GiB mapped at Open a writer
// that must remap waits for it. Callers streaming to a slow client over a
// large file may prefer to back up to a local file first.
func (db *DB) Backup(w io.Writer) (int64, error) {
	var n int64
	err := db.rawView(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	}, true)
	if err != nil {
		return n, fmt.Errorf("store: backup %s: %w", db.path, err)
	}
	return n, nil
}

// Size returns the size in bytes of the data as of a read transaction (the
// file may be larger because bbolt grows it ahead).
func (db *DB) Size() (int64, error) {
	var n int64
	err := db.view(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n, err
}

// Check runs bbolt's consistency check (unreachable or doubly used pages,
// unsorted keys, ...) in a read transaction and returns the first problem,
// or nil. It reads every page: run it at start or from an admin command, not
// per request.
func (db *DB) Check() error {
	var first error
	err := db.rawView(func(tx *bolt.Tx) error {
		first = checkTx(tx)
		return nil
	}, true)
	if err != nil {
		return fmt.Errorf("store: check %s: %w", db.path, err)
	}
	if first != nil {
		return fmt.Errorf("store: check %s: %w", db.path, first)
	}
	return nil
}

// checkTx returns the first error of tx.Check, draining the channel so the
// checking goroutine ends.
func checkTx(tx *bolt.Tx) error {
	var first error
	for err := range tx.Check() {
		if first == nil {
			first = err
		}
	}
	return first
}

// Restore replaces the data file at dstPath with the backup at src. It first
// checks src with VerifyFile (a damaged backup is refused, not mapped), opens
// it read-only and checks that it is a consistent bbolt file carrying
// replyd's schema; then it writes a copy next to dstPath, fsyncs it, renames
// it over dstPath and fsyncs the directory, so dstPath is either the old file
// or the complete new one. It fails with ErrLocked when a running replyd holds
// dstPath (stop the service first) or src. dstPath need not exist.
func Restore(src, dstPath string) error {
	if err := VerifyFile(src); err != nil {
		var d *DamagedError
		if errors.As(err, &d) {
			return fmt.Errorf("store: restore: the backup %s is damaged: %s; choose an older backup", src, d.Problem)
		}
		return fmt.Errorf("store: restore: %w", describeOpenError(src, err))
	}
	sdb, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true, Timeout: DefaultTimeout})
	if err != nil {
		return fmt.Errorf("store: restore: %w", describeOpenError(src, err))
	}
	defer sdb.Close()

	unlock, err := lockFile(dstPath)
	if err != nil {
		return err
	}
	defer unlock()

	dir := filepath.Dir(dstPath)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dstPath)+".restore-*")
	if err != nil {
		return fmt.Errorf("store: restore to %s: %w", dstPath, describeIOError(err))
	}
	tmpName := tmp.Name()
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()

	err = sdb.View(func(tx *bolt.Tx) error {
		if err := checkSchema(tx); err != nil {
			return err
		}
		if err := checkTx(tx); err != nil {
			return fmt.Errorf("consistency check: %w", err)
		}
		_, err := tx.WriteTo(tmp)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: restore: backup %s is not usable: %w", src, describeIOError(err))
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("store: restore to %s: %w", dstPath, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("store: restore to %s: %w", dstPath, describeIOError(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store: restore to %s: %w", dstPath, describeIOError(err))
	}
	if err := os.Rename(tmpName, dstPath); err != nil {
		return fmt.Errorf("store: restore to %s: %w", dstPath, describeIOError(err))
	}
	committed = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("store: restore to %s: sync directory: %w", dstPath, err)
	}
	return nil
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
