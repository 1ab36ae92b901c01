package postgres_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/bolt"
	"github.com/replyd/replyd/store/postgres"
)

// The benchmarks run against a server pgtest starts: a durable PostgreSQL
// (fsync on, synchronous_commit on) on this machine's disk, as a hospital's
// would be; they report quantiles as custom metrics.

// benchStore opens a store on a fresh server for b.
func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	return mustOpen(b, pgtest.Start(b).NewDatabase(b), postgres.Options{})
}

// quantiles reports the p50 and p99 of ds (in µs) as metrics named
// prefix-p50-µs and prefix-p99-µs.
func quantiles(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), prefix+"-p50-µs")
	b.ReportMetric(q(0.99), prefix+"-p99-µs")
}

// BenchmarkRequestStoreWork measures the store work of one /v1/infer
// request: the key lookup, the rate-limit check and the log append (the
// touch is once a minute). On PostgreSQL all three are round trips; the
// append is a durable commit (a WAL flush). bbolt runs the same lookup and
// append, interleaved request by request so that both see the same machine
// (its rate limit is an in-memory map, which costs next to nothing).
func BenchmarkRequestStoreWork(b *testing.B) {
	pg := benchStore(b)
	bdb, err := bolt.Open(filepath.Join(b.TempDir(), "replyd.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer bdb.Close()
	key := store.APIKey{Hash: fmt.Sprintf("%064x", 1), Scopes: []string{"infer"}, RateLimitPerMinute: 1 << 30}
	for _, s := range []store.Store{pg, bdb} {
		if err := s.CreateKey(key); err != nil {
			b.Fatal(err)
		}
	}
	entry := store.LogEntry{Level: store.LevelInfo, Message: "infer ok: 3 candidates in 212 ms", ResourceType: store.ResourceAPIKey,
		ResourceID: key.Hash, StreamName: store.StreamInfer, Subject: key.Hash, Status: 200, LatencyMS: 212, Node: "box-a"}
	var pgAll, pgCheck, pgAppend, boltAll []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		runPG := func() {
			t0 := time.Now()
			if _, err := pg.GetKey(key.Hash); err != nil {
				b.Fatal(err)
			}
			if ok, _, err := pg.Allow(key.Hash, key.RateLimitPerMinute, t0); err != nil || !ok {
				b.Fatal(ok, err)
			}
			t1 := time.Now()
			if err := pg.AppendLog(entry); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			pgAll, pgCheck, pgAppend = append(pgAll, t2.Sub(t0)), append(pgCheck, t1.Sub(t0)), append(pgAppend, t2.Sub(t1))
		}
		runBolt := func() {
			t0 := time.Now()
			if _, err := bdb.GetKey(key.Hash); err != nil {
				b.Fatal(err)
			}
			if err := bdb.AppendLog(entry); err != nil {
				b.Fatal(err)
			}
			boltAll = append(boltAll, time.Since(t0))
		}
		if i%2 == 0 {
			runPG()
			runBolt()
		} else {
			runBolt()
			runPG()
		}
	}
	b.StopTimer()
	quantiles(b, "pg-all3", pgAll)
	quantiles(b, "pg-lookup+limit", pgCheck)
	quantiles(b, "pg-append", pgAppend)
	quantiles(b, "bolt-lookup+append", boltAll)
}

// BenchmarkAppendLogParallel measures durable log appends into PostgreSQL
// from many concurrent requests (as several boxes send them): appends/s is
// the figure the README's "how many boxes" arithmetic starts from.
func BenchmarkAppendLogParallel(b *testing.B) {
	pg := benchStore(b)
	entry := store.LogEntry{Level: store.LevelInfo, Message: "infer ok: 3 candidates in 212 ms", ResourceType: store.ResourceAPIKey,
		ResourceID: fmt.Sprintf("%064x", 1), StreamName: store.StreamInfer, Subject: "s", Status: 200, LatencyMS: 212, Node: "box-a"}
	var n atomic.Int64
	b.SetParallelism(8) // 16 writers on 2 cores: the pool's 10 connections stay busy
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := entry
			e.Timestamp = time.Now()
			if err := pg.AppendLog(e); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "appends/s")
}

// BenchmarkRequestStoreWorkParallel runs the whole store work of a request
// (key lookup, rate-limit check, durable log append) from 16 concurrent
// requests, as several boxes would send it, and reports requests/s: what one
// PostgreSQL takes on this machine before it is the bottleneck.
func BenchmarkRequestStoreWorkParallel(b *testing.B) {
	pg := benchStore(b)
	var keys []string
	for i := range 40 { // forty tablets
		k := store.APIKey{Hash: fmt.Sprintf("%064x", i), Scopes: []string{"infer"}, RateLimitPerMinute: 1 << 30}
		if err := pg.CreateKey(k); err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k.Hash)
	}
	var n, next atomic.Int64
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h := keys[next.Add(1)%int64(len(keys))]
			now := time.Now()
			if _, err := pg.GetKey(h); err != nil {
				b.Error(err)
				return
			}
			if _, _, err := pg.Allow(h, 1<<30, now); err != nil {
				b.Error(err)
				return
			}
			if err := pg.AppendLog(store.LogEntry{Timestamp: now, Level: store.LevelInfo, Message: "infer ok: 3 candidates in 212 ms",
				ResourceType: store.ResourceAPIKey, ResourceID: h, StreamName: store.StreamInfer, Subject: h, Status: 200, LatencyMS: 212, Node: "box-a"}); err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "requests/s")
}
