package bolt

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/store"
)

var fuzzBase cachedFile

// fuzzBaseFile is a small data file with every kind of page: branch and
// leaf pages, buckets within buckets, inline buckets and overflow pages.
func fuzzBaseFile(tb testing.TB) []byte {
	return fuzzBase.get(tb, func(path string) {
		writeSampleFile(tb, path, 60, 120)
		db, err := Open(path, Options{})
		Must(tb, err)
		Must(tb, db.AppendLog(logEntryOfSize(20_000))) // overflow pages
		Must(tb, db.Close())
	})
}

// FuzzDamagedFile damages a real data file (a truncation, and pages or bytes
// overwritten with garbage or with other pages) and runs what `replyd check`
// and `replyd serve` run on it: Open read-only and Check, and a writable
// Open. Whatever the damage, they return an error or succeed, and never
// crash the process (a fault through bbolt's map or a panic in bbolt).
// `make fuzz` runs it.
func FuzzDamagedFile(f *testing.F) {
	f.Add(uint32(0), []byte{})
	f.Add(uint32(2_000_000), []byte{})
	f.Add(uint32(40_000), []byte{})
	f.Add(uint32(4096), []byte{})
	f.Add(uint32(0), []byte{5, 0, 0, 9, 0, 0, 12, 0, 0})
	f.Add(uint32(0), []byte{3, 0, 2, 7, 0, 0})
	f.Add(uint32(0), []byte{0, 0, 0, 1, 0, 0})
	f.Add(uint32(0), []byte{6, 0, 1, 16, 0, 7})
	f.Fuzz(func(t *testing.T, cut uint32, ops []byte) {
		base := fuzzBaseFile(t)
		data := damage(base, cut, ops)
		path := filepath.Join(t.TempDir(), "replyd.db")
		Must(t, os.WriteFile(path, data, 0o600))
		if db, err := Open(path, Options{ReadOnly: true}); err == nil {
			_ = db.Check()
			_ = db.Close()
		} else if len(data) < 8192 && !errors.Is(err, ErrDamaged) {
			t.Fatalf("a file of %d bytes opened with %v, want ErrDamaged", len(data), err)
		}
		if db, err := Open(path, Options{}); err == nil {
			_ = db.Check()
			_ = db.Close()
		}
	})
}

// damage applies the fuzzer's ops to a copy of base: each op of three bytes
// names a page (the first two bytes, modulo the pages) and what to write
// there (the third): 0, the page filled with random bytes; 1, a copy of the
// page after it; 2, its header with random bytes; 3 and up, one byte of the
// header changed. cut, when not 0, truncates the result to cut modulo its
// length.
func damage(base []byte, cut uint32, ops []byte) []byte {
	const pageSize = 4096
	data := append([]byte(nil), base...)
	pages := len(data) / pageSize
	for i := 0; i+3 <= len(ops) && pages > 1; i += 3 {
		p := int(binary.LittleEndian.Uint16(ops[i:])) % pages
		page := data[p*pageSize : (p+1)*pageSize]
		rng := rand.New(rand.NewPCG(uint64(p), uint64(ops[i+2])))
		switch op := ops[i+2]; {
		case op == 0:
			for j := range page {
				page[j] = byte(rng.Uint32())
			}
		case op == 1:
			q := (p + 1) % pages
			copy(page, data[q*pageSize:(q+1)*pageSize])
		case op == 2:
			for j := range pageHeaderSize {
				page[j] = byte(rng.Uint32())
			}
		default:
			page[int(op)%pageHeaderSize] ^= op
		}
	}
	if cut > 0 {
		data = data[:int(cut)%len(data)]
	}
	return data
}

// logEntryOfSize is a log entry whose message has n bytes.
func logEntryOfSize(n int) store.LogEntry {
	return store.LogEntry{Timestamp: t0, Level: "info", Message: strings.Repeat("y", n), ResourceType: "admin"}
}
