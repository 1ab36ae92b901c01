package fault

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// BenchmarkInferByStore measures what the PostgreSQL store adds to /v1/infer
// as a tablet sees it: two replyd processes on the demo models, one on its
// bbolt file and one on a local PostgreSQL (durable: fsync and synchronous
// commits on), each asked the same text-only dialog in turn, one request at
// a time, alternating which goes first. It reports each store's p50 and p99,
// their differences and the median of the paired differences, in ms. The
// model's spread from request to request (tens of ms on a busy machine) is
// far larger than what the store adds: store/postgres's
// BenchmarkRequestStoreWork measures that part alone.
func BenchmarkInferByStore(b *testing.B) {
	url := pgtest.Start(b).NewDatabase(b)
	start := func(env map[string]string) *testutil.Replyd {
		p := testutil.StartReplyd(b, replydproc.Options{Bin: replydBin, Models: demoDir, DataDir: b.TempDir(), Env: env})
		p.WaitReady()
		return p
	}
	bolt := start(map[string]string{"REPLYD_NODE_NAME": "bolt"})
	pg := start(map[string]string{"REPLYD_NODE_NAME": "pg", "REPLYD_STORE_URL": url})
	ctx := context.Background()
	type box struct {
		p   *testutil.Replyd
		key string
		ds  []time.Duration
	}
	boxes := []*box{{p: bolt}, {p: pg}}
	for _, x := range boxes {
		x.key = x.p.CreateKey("bench").APIKey
		for i := range 5 { // warm-up: models paged in, connections made
			if resp, err := x.p.InferText(ctx, x.key, fmt.Sprintf("Warm-up line %d.", i)); err != nil || resp.Status != 200 {
				b.Fatalf("warm-up: %d %v %s", resp.Status, err, resp.Body)
			}
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		order := boxes
		if i%2 == 1 {
			order = []*box{boxes[1], boxes[0]}
		}
		for _, x := range order {
			t0 := time.Now()
			resp, err := x.p.InferText(ctx, x.key, "Would you like some tea?")
			if err != nil || resp.Status != 200 {
				b.Fatalf("infer: %d %v %s", resp.Status, err, resp.Body)
			}
			x.ds = append(x.ds, time.Since(t0))
		}
	}
	b.StopTimer()
	q := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1e3
	}
	b.ReportMetric(q(boxes[0].ds, .5), "bolt-p50-ms")
	b.ReportMetric(q(boxes[0].ds, .99), "bolt-p99-ms")
	b.ReportMetric(q(boxes[1].ds, .5), "pg-p50-ms")
	b.ReportMetric(q(boxes[1].ds, .99), "pg-p99-ms")
	b.ReportMetric(q(boxes[1].ds, .5)-q(boxes[0].ds, .5), "pg-added-p50-ms")
	b.ReportMetric(q(boxes[1].ds, .99)-q(boxes[0].ds, .99), "pg-added-p99-ms")
	// The requests of one round ran back to back: the median of their
	// differences cancels most of the machine's drift, not the model's own
	// spread from one request to the next.
	pairs := make([]time.Duration, len(boxes[0].ds))
	for i := range pairs {
		pairs[i] = boxes[1].ds[i] - boxes[0].ds[i]
	}
	slices.Sort(pairs)
	b.ReportMetric(float64(pairs[len(pairs)/2].Microseconds())/1e3, "pg-minus-bolt-paired-median-ms")
}
