package store

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fillLogs writes n infer entries spread evenly over the 7 days before end,
// from 500 subjects, in a few large transactions (AppendLog's one fsync per
// batch would make setup slow).
func fillLogs(tb testing.TB, db *DB, n int, end time.Time) {
	tb.Helper()
	step := 7 * 24 * time.Hour / time.Duration(n)
	for done := 0; done < n; {
		Must(tb, db.bolt.Update(func(tx *bolt.Tx) error {
			logs, idx := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx)
			for i := 0; i < 10000 && done < n; i, done = i+1, done+1 {
				seq, _ := logs.NextSequence()
				ts := end.Add(-time.Duration(n-done) * step)
				subj := fmt.Sprintf("%064d", done%500)
				k := timeKey(ts, seq)
				if err := logs.Put(k, []byte(`{"Level":"info","Message":"infer ok","StreamName":"infer"}`)); err != nil {
					return err
				}
				if err := idx.Put(k, []byte(subj)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

// BenchmarkStats7Days measures Stats over a 7-day window holding 100k infer
// entries (the whole log), the admin page's default view.
func BenchmarkStats7Days(b *testing.B) {
	db, _ := MustOpen(b)
	end := t0.Add(7 * 24 * time.Hour)
	fillLogs(b, db, 100_000, end)
	b.ResetTimer()
	for b.Loop() {
		s, err := db.Stats(end.Add(-7*24*time.Hour), end)
		if err != nil || s.TotalRequests != 100_000 || s.ActiveUsers != 500 {
			b.Fatalf("Stats = %+v, %v", s, err)
		}
	}
}

// BenchmarkStatsLastDay measures Stats over the last day of the same 7-day
// log: the cursor seek skips the older six days.
func BenchmarkStatsLastDay(b *testing.B) {
	db, _ := MustOpen(b)
	end := t0.Add(7 * 24 * time.Hour)
	fillLogs(b, db, 100_000, end)
	b.ResetTimer()
	for b.Loop() {
		if _, err := db.Stats(end.Add(-24*time.Hour), end); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatsSeriesHourly7Days measures an hourly series over 7 days of
// 100k entries.
func BenchmarkStatsSeriesHourly7Days(b *testing.B) {
	db, _ := MustOpen(b)
	end := t0.Add(7 * 24 * time.Hour)
	fillLogs(b, db, 100_000, end)
	b.ResetTimer()
	for b.Loop() {
		if _, err := db.StatsSeries(end.Add(-7*24*time.Hour), end, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendLogParallel measures durable appends from concurrent
// requests (Batch groups their fsyncs).
func BenchmarkAppendLogParallel(b *testing.B) {
	db, _ := MustOpen(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := db.AppendLog(LogEntry{Timestamp: t0, Level: LevelInfo, Message: "infer ok", StreamName: StreamInfer, Subject: "u"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
