package bolt

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// fillLogs writes n infer entries spread evenly over the 7 days before end,
// from 500 subjects and 20 keys, each an answered inference with an id and
// 4 candidates, every second one with an outcome, in a few large
// transactions (AppendLog's one fsync per batch would make setup slow).
func fillLogs(tb testing.TB, db *DB, n int, end time.Time) {
	tb.Helper()
	step := 7 * 24 * time.Hour / time.Duration(n)
	for done := 0; done < n; {
		Must(tb, db.bolt.Update(func(tx *bolt.Tx) error {
			logs, idx, ids := tx.Bucket(bucketLogs), tx.Bucket(bucketInferIdx), tx.Bucket(bucketInferences)
			for i := 0; i < 10000 && done < n; i, done = i+1, done+1 {
				seq, _ := logs.NextSequence()
				ts := end.Add(-time.Duration(n-done) * step)
				k := timeKey(ts, seq)
				row := inferRow{
					subject: fmt.Sprintf("%064d", done%500), keyHash: fmt.Sprintf("%064d", done%20), status: 200,
					latencyMS: int64(300 + done%700), inferenceID: fmt.Sprintf("inf_%018d", done),
					promptVersion: fmt.Sprint(1 + done/(n/3+1)), candidateChars: []int{20, 31, 12, 25},
				}
				if done%2 == 0 {
					row.outcome = &store.Outcome{Kind: store.OutcomeSpoken, Rank: 1 + done%4, SpokenChars: 20, KeystrokesSaved: 19, TimeToChoiceMS: int64(done % 9000), FirstAt: ts, At: ts}
				}
				if err := logs.Put(k, []byte(`{"Level":"info","Message":"infer ok: 4 candidates in 812 ms","StreamName":"infer","Status":200}`)); err != nil {
					return err
				}
				if err := idx.Put(k, row.encode()); err != nil {
					return err
				}
				if err := ids.Put([]byte(row.inferenceID), k); err != nil {
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
		if err != nil || s.TotalRequests != 100_000 || s.ActiveUsers != 500 || s.Outcomes != 50_000 || len(s.ByKey) != 20 {
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
			if err := db.AppendLog(store.LogEntry{Timestamp: t0, Level: store.LevelInfo, Message: "infer ok", StreamName: store.StreamInfer, Subject: "u"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// fill100MB grows the file past 100 MB with a week of log entries and one
// remembering user with 2,000 pairs.
func fill100MB(b *testing.B) (*DB, string) {
	db, _ := MustOpen(b)
	end := t0.Add(7 * 24 * time.Hour)
	fillLogs(b, db, 250_000, end)
	const subject = "0000000000000000000000000000000000000000000000000000000000000007"
	Must(b, db.bolt.Update(func(tx *bolt.Tx) error {
		u, err := ensureUser(tx, subject, "", "", t0)
		if err != nil {
			return err
		}
		for i := range 2000 {
			k := timeKey(t0.Add(time.Duration(i)*time.Second), uint64(i))
			p := store.Pair{InferenceID: fmt.Sprint("inf_", i), Partner: "Would you like a cup of tea now?", Reply: "Yes please, with milk and no sugar."}
			if err := putPair(tx, u, subject, k, p); err != nil {
				return err
			}
		}
		return nil
	}))
	if size, _ := db.Size(); size < 100<<20 {
		b.Fatalf("file is %d MB, want 100 MB", size>>20)
	}
	return db, subject
}

// BenchmarkScrub100MB measures ScrubFreePages on a file of over 100 MB
// after a user's deletion freed pages: the time new transactions wait.
func BenchmarkScrub100MB(b *testing.B) {
	db, subject := fill100MB(b)
	if _, err := db.deleteUserRows(subject); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var pages int
	for b.Loop() {
		n, _, err := db.ScrubFreePages()
		if err != nil {
			b.Fatal(err)
		}
		pages = n
	}
	b.ReportMetric(float64(pages), "pages")
}

// BenchmarkDeleteUser100MB measures a whole DeleteUser on a file of over
// 100 MB: the transaction that removes the user's key, pairs and outcomes
// (it reads the whole infer index; writers wait for it as for any write)
// and the scrub. Each iteration deletes a freshly restored user.
func BenchmarkDeleteUser100MB(b *testing.B) {
	db, subject := fill100MB(b)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		Must(b, db.bolt.Update(func(tx *bolt.Tx) error {
			u, err := ensureUser(tx, subject, "", "", t0)
			if err != nil {
				return err
			}
			for i := range 200 {
				k := timeKey(t0.Add(time.Duration(i)*time.Second), uint64(i))
				if err := putPair(tx, u, subject, k, store.Pair{Partner: "p", Reply: "r"}); err != nil {
					return err
				}
			}
			return nil
		}))
		b.StartTimer()
		if _, err := db.DeleteUser(subject); err != nil {
			b.Fatal(err)
		}
	}
}
