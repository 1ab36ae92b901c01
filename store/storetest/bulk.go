package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// FillBulk makes s large, for the tests of damaged data files: the admin
// key hash "admin-hash", keys API keys (hash-00000, hash-00001, ... created
// a second apart from T0) and logs infer log entries whose messages are
// about size bytes (a millisecond apart from T0). workers goroutines append
// the entries at once, so that a store that batches concurrent appends
// (bbolt's Batch) fills without an fsync each; with 1 worker the store is
// written in the same order every run.
func FillBulk(tb testing.TB, s store.Store, keys, logs, size, workers int) {
	tb.Helper()
	Must(tb, s.SetAdminKeyHash("admin-hash"))
	for i := range keys {
		MustCreateKey(tb, s, fmt.Sprintf("hash-%05d", i), T0.Add(time.Duration(i)*time.Second))
	}
	pad := strings.Repeat("m", size)
	var wg sync.WaitGroup
	for w := range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < logs; i += max(workers, 1) {
				e := store.LogEntry{Timestamp: T0.Add(time.Duration(i) * time.Millisecond), Level: store.LevelInfo,
					Message: fmt.Sprintf("entry %d %s", i, pad), ResourceType: "infer", ResourceID: fmt.Sprint(i)}
				if err := s.AppendLog(e); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
}
