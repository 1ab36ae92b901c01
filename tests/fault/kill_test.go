package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/pgtest"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// TestKill9DuringBurst kills replyd with SIGKILL while key creations,
// inferences and feedback are being answered, restarts it on the same store
// and checks that nothing acknowledged was lost: every key whose creation
// was answered 200 is in the key list, there are at least as many
// successful infer log entries as 200 infer answers, and every feedback
// answered 200 is in the outcome export (feedback shares commits: issue 26). It runs on both stores: the bbolt file (which
// must also pass `replyd check` before the restart) and PostgreSQL.
func TestKill9DuringBurst(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		killBurst(t, replydproc.Options{DataDir: t.TempDir()}, func(p *testutil.Replyd) {
			out, err := p.Run(context.Background(), "check")
			if err != nil || !strings.Contains(out, "consistent") {
				t.Fatalf("replyd check after kill -9: %v\n%s", err, out)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Start(t).NewDatabase(t)
		killBurst(t, replydproc.Options{DataDir: t.TempDir(), Env: map[string]string{"REPLYD_STORE_URL": url}}, func(*testutil.Replyd) {})
	})
}

// killBurst is TestKill9DuringBurst on the store o configures; afterKill
// runs between the kill and the restart.
func killBurst(t *testing.T, o replydproc.Options, afterKill func(p *testutil.Replyd)) {
	p := startProc(t, o)
	p.WaitReady()
	inferKey := p.CreateKey("fault-infer")

	var (
		mu        sync.Mutex
		ackedKeys = map[string]bool{} // api_key_hash answered 200
		ackedInfr int                 // infer answered 200
		ackedFb   = map[string]bool{} // inference_id whose feedback was answered 200
	)
	inferAcked := make(chan struct{}, 1) // signalled on every 200 infer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const workers, keysPerWorker, infersPerWorker = 6, 100, 150
	// waitFor polls cond (two minutes at most: a bound, not a timing).
	waitFor := func(cond func() bool) {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Inferences first: they are slow, so several are in flight at any time.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < infersPerWorker && ctx.Err() == nil; i++ {
				resp, err := p.InferText(ctx, inferKey.APIKey, fmt.Sprintf("Burst line %d of worker %d: shall we go out?", i, w))
				if err == nil && resp.Status == http.StatusOK {
					mu.Lock()
					ackedInfr++
					mu.Unlock()
					select {
					case inferAcked <- struct{}{}:
					default:
					}
					var r struct {
						InferenceID string `json:"inference_id"`
					}
					if json.Unmarshal(resp.Body, &r) != nil || r.InferenceID == "" {
						continue
					}
					fb, err := p.Do(ctx, replydproc.Request{Method: http.MethodPost, Path: "/v1/feedback", Header: map[string]string{"X-API-KEY": inferKey.APIKey},
						JSON: map[string]any{"inference_id": r.InferenceID, "chosen_rank": 1}, Timeout: 30 * time.Second})
					if err == nil && fb.Status == http.StatusOK {
						mu.Lock()
						ackedFb[r.InferenceID] = true
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	waitFor(func() bool { return ackedInfr >= 5 })
	// Then key creations, fast: the kill lands among them.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < keysPerWorker && ctx.Err() == nil; i++ {
				resp, err := p.Do(ctx, replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/keys", Header: p.AdminHeader(),
					JSON: map[string]any{"client_id": fmt.Sprintf("burst-%d-%d", w, i)}, Timeout: 30 * time.Second})
				if err != nil || resp.Status != http.StatusOK {
					continue // not acknowledged: may or may not be stored
				}
				var k testutil.CreatedKey
				if json.Unmarshal(resp.Body, &k) == nil && k.APIKeyHash != "" {
					mu.Lock()
					ackedKeys[k.APIKeyHash] = true
					mu.Unlock()
				}
			}
		}(w)
	}
	waitFor(func() bool { return len(ackedKeys) >= 40 })
	// Kill the moment the next inference is acknowledged (its answer has
	// reached the client, so its log entry must already be durable), or
	// once half the key creations are acknowledged: inferences (each
	// followed by its feedback) are slow, and the kill must land among the
	// key creations, not after them.
	select {
	case <-inferAcked:
	default:
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-inferAcked:
			deadline = time.Time{}
			continue
		case <-time.After(time.Millisecond):
		}
		mu.Lock()
		half := len(ackedKeys) >= workers*keysPerWorker/2
		mu.Unlock()
		if half {
			break
		}
	}
	p.Kill()
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("killed with %d key creations, %d inferences and %d feedbacks acknowledged", len(ackedKeys), ackedInfr, len(ackedFb))
	if len(ackedKeys) == 0 || ackedInfr == 0 {
		t.Fatalf("the burst never got going (%d keys, %d inferences acknowledged)", len(ackedKeys), ackedInfr)
	}
	if len(ackedKeys) == workers*keysPerWorker || ackedInfr == workers*infersPerWorker {
		t.Fatalf("the burst was over before the kill (%d keys, %d inferences): nothing was tested", len(ackedKeys), ackedInfr)
	}

	afterKill(p)

	o.AdminKey = p.AdminKey
	p2 := startProc(t, o)
	p2.WaitReady()
	body := p2.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys?include_revoked=true&limit=1000", Header: p2.AdminHeader()}, http.StatusOK)
	var list struct {
		Items []struct {
			APIKeyHash string `json:"APIKeyHash"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range list.Items {
		have[k.APIKeyHash] = true
	}
	lost := 0
	for h := range ackedKeys {
		if !have[h] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged keys are gone after kill -9 and restart", lost, len(ackedKeys))
	}

	body = p2.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/logs?stream=infer&window=1h&limit=1000", Header: p2.AdminHeader()}, http.StatusOK)
	var logs struct {
		Items []struct {
			Status int `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &logs); err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, e := range logs.Items {
		if e.Status == http.StatusOK {
			ok++
		}
	}
	if ok < ackedInfr {
		t.Errorf("%d successful infer log entries after kill -9 and restart, but %d inferences were answered 200", ok, ackedInfr)
	}

	body = p2.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/outcomes?format=jsonl", Header: p2.AdminHeader()}, http.StatusOK)
	reported := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var o struct {
			InferenceID string `json:"inference_id"`
		}
		if line != "" && json.Unmarshal([]byte(line), &o) == nil {
			reported[o.InferenceID] = true
		}
	}
	lostFb := 0
	for id := range ackedFb {
		if !reported[id] {
			lostFb++
		}
	}
	if len(ackedFb) == 0 {
		t.Error("no feedback was acknowledged before the kill: nothing was tested")
	}
	if lostFb > 0 {
		t.Errorf("%d of %d acknowledged feedbacks are gone after kill -9 and restart", lostFb, len(ackedFb))
	}
	p2.Stop()
}
