package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testaudio"
)

// Routes as reported.
const (
	routeInfer      = "POST /v1/infer"
	routeInferAudio = "POST /v1/infer (audio)"
	routeLogs       = "GET /v1/admin/logs"
	routeStats      = "GET /v1/admin/stats"
	routeKeys       = "GET /v1/admin/keys"
)

var routeOrder = []string{routeInfer, routeInferAudio, routeLogs, routeStats, routeKeys, routeActivate}

// outcome is one request's result.
type outcome struct {
	route   string
	status  int    // 0: no response
	code    string // the error body's "error" field, when there is one
	latency time.Duration
	err     error
	// noSpeech: a 200 answer of /v1/infer that found no speech, for which
	// no language model ran.
	noSpeech bool
}

// results gathers every outcome of a run.
type results struct {
	mu        sync.Mutex
	started   time.Time
	elapsed   time.Duration
	latencies map[string][]time.Duration
	// byOutcome holds the inference routes' latencies by "admitted" (200)
	// and "shed" (503 overloaded): admission control is judged by both.
	byOutcome map[string][]time.Duration
	byStatus  map[string]map[string]int // route -> "200" / "503 overloaded" / "no response" -> count
	transport []string                  // first few transport errors

	inferResponses int // /v1/infer answers received, any status
	loggedInfer    int // infer log entries in the run's window
	loggedLimited  bool
	statsTotal     int // total_requests over the run's window
	statsErr       error
	logsErr        error

	// With -switch-every (switch.go): the inference answers (200) and
	// those without speech, the switches made and refused, and the
	// answers by language model over the run's window.
	switching  bool
	answered   int
	noSpeech   int
	switches   int
	switchErrs []string
	byModel    map[string]int
	byModelErr error
}

func newResults() *results {
	return &results{latencies: map[string][]time.Duration{}, byOutcome: map[string][]time.Duration{}, byStatus: map[string]map[string]int{}}
}

func (r *results) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := "no response"
	if o.status != 0 {
		key = strconv.Itoa(o.status)
		if o.code != "" && o.status >= 400 {
			key += " " + o.code
		}
		r.latencies[o.route] = append(r.latencies[o.route], o.latency)
		if o.route == routeInfer || o.route == routeInferAudio {
			r.inferResponses++
			switch {
			case o.status == http.StatusOK:
				r.answered++
				if o.noSpeech {
					r.noSpeech++
				}
				r.byOutcome[o.route+" admitted (200)"] = append(r.byOutcome[o.route+" admitted (200)"], o.latency)
			case o.status == http.StatusServiceUnavailable && o.code == "overloaded":
				r.byOutcome[o.route+" shed (503)"] = append(r.byOutcome[o.route+" shed (503)"], o.latency)
			}
		}
	} else if len(r.transport) < 5 {
		r.transport = append(r.transport, fmt.Sprintf("%s: %v", o.route, o.err))
	}
	if r.byStatus[o.route] == nil {
		r.byStatus[o.route] = map[string]int{}
	}
	r.byStatus[o.route][key]++
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted)) + 0.999999)
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func (r *results) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "\n%-24s %8s %9s %9s %9s %9s %9s\n", "route", "answers", "per s", "p50 ms", "p95 ms", "p99 ms", "max ms")
	total := 0
	for _, route := range routeOrder {
		l := append([]time.Duration(nil), r.latencies[route]...)
		if len(l) == 0 && r.byStatus[route] == nil {
			continue
		}
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		total += len(l)
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
		var max time.Duration
		if len(l) > 0 {
			max = l[len(l)-1]
		}
		fmt.Fprintf(w, "%-24s %8d %9.2f %9s %9s %9s %9s\n", route, len(l), float64(len(l))/secs,
			ms(percentile(l, 50)), ms(percentile(l, 95)), ms(percentile(l, 99)), ms(max))
	}
	fmt.Fprintf(w, "%-24s %8d %9.2f   over %.1f s\n", "all", total, float64(total)/secs, secs)
	var outcomes []string
	for k := range r.byOutcome {
		outcomes = append(outcomes, k)
	}
	sort.Strings(outcomes)
	for _, k := range outcomes {
		l := append([]time.Duration(nil), r.byOutcome[k]...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
		fmt.Fprintf(w, "  %-38s %6d   p50 %9s   p95 %9s ms\n", k, len(l), ms(percentile(l, 50)), ms(percentile(l, 95)))
	}

	fmt.Fprintf(w, "\nresponses by status:\n")
	for _, route := range routeOrder {
		m := r.byStatus[route]
		if m == nil {
			continue
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
		}
		fmt.Fprintf(w, "  %-24s %s\n", route, strings.Join(parts, ", "))
	}
	for _, t := range r.transport {
		fmt.Fprintf(w, "  transport error: %s\n", t)
	}
	fmt.Fprintf(w, "\ninfer responses received: %d\n", r.inferResponses)
	if r.statsErr == nil {
		fmt.Fprintf(w, "stats total_requests in the run's window: %d\n", r.statsTotal)
	}
	if r.logsErr == nil {
		more := ""
		if r.loggedLimited {
			more = " (the 1000 limit of one page: counted by stats instead)"
		}
		fmt.Fprintf(w, "infer log entries in the run's window: %d%s\n", r.loggedInfer, more)
	}
	if r.switching {
		r.printSwitches(w)
	}
}

// problems lists what makes the run fail.
func (r *results) problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, route := range routeOrder {
		for k, n := range r.byStatus[route] {
			switch {
			case k == "no response":
				out = append(out, fmt.Sprintf("%s: %d requests got no response", route, n))
			case strings.HasPrefix(k, "5") && k != "503 overloaded" && k != "503 loading":
				out = append(out, fmt.Sprintf("%s: %d answers %s", route, n, k))
			}
		}
	}
	if r.statsErr != nil {
		out = append(out, "reading stats after the run: "+r.statsErr.Error())
	} else if r.statsTotal != r.inferResponses {
		out = append(out, fmt.Sprintf("stats count %d infer calls, the tablets received %d infer responses", r.statsTotal, r.inferResponses))
	}
	if r.logsErr != nil {
		out = append(out, "reading logs after the run: "+r.logsErr.Error())
	} else if !r.loggedLimited && r.loggedInfer != r.inferResponses {
		out = append(out, fmt.Sprintf("%d infer log entries for %d infer responses", r.loggedInfer, r.inferResponses))
	}
	if r.switching {
		out = append(out, r.switchProblems()...)
	}
	sort.Strings(out)
	return out
}

// client talks to one replyd.
type client struct {
	base     string
	adminKey string
	http     *http.Client
}

func newClient(base, adminKey string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     90 * time.Second,
		// Only loopback servers are driven: a self-signed certificate
		// (REPLYD_TLS=auto) is expected.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback only: see requireLoopback
	}
	return &client{base: strings.TrimRight(base, "/"), adminKey: adminKey,
		http: &http.Client{Transport: tr, Timeout: 3 * time.Minute}}
}

// do sends req and reads the answer; the error body's code is returned.
func (c *client) do(req *http.Request, route string) (outcome, []byte) {
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return outcome{route: route, err: err, latency: time.Since(start)}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	o := outcome{route: route, status: resp.StatusCode, latency: time.Since(start), err: err}
	if resp.StatusCode >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			o.code = e.Error
		}
	}
	return o, body
}

func (c *client) admin(ctx context.Context, method, path string, body any) (outcome, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return outcome{}, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return outcome{}, nil, err
	}
	req.Header.Set("X-ADMIN-KEY", c.adminKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	o, b := c.do(req, method+" "+strings.SplitN(path, "?", 2)[0])
	return o, b, o.err
}

// createKey makes one tablet's API key with a rate limit the run cannot hit.
func (c *client) createKey(ctx context.Context, i int) (string, error) {
	o, body, err := c.admin(ctx, http.MethodPost, "/v1/admin/keys", map[string]any{
		"client_id":             fmt.Sprintf("loadtest-tablet-%02d", i),
		"rate_limit_per_minute": 100000,
	})
	if err != nil {
		return "", err
	}
	if o.status != http.StatusOK {
		return "", fmt.Errorf("creating a key: %d %s", o.status, body)
	}
	var k struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(body, &k); err != nil || k.APIKey == "" {
		return "", fmt.Errorf("creating a key: unexpected answer %s", body)
	}
	return k.APIKey, nil
}

var lines = []string{
	"Good morning, did you sleep well?",
	"Would you like tea or coffee with breakfast?",
	"Your daughter called, she is coming at four.",
	"Shall we go out to the garden after lunch?",
	"Is the pillow all right or should I move it?",
	"The physiotherapist is here, are you ready?",
	"Do you want to watch the match tonight?",
	"Are you in any pain right now?",
}

var replies = []string{"Yes, thank you.", "Not really.", "Coffee, please.", "Later maybe.", "I am tired."}

// inferBody builds a multipart /v1/infer body; with audio, the last speaker
// message is marked as coming from the recording.
func inferBody(rng *rand.Rand, tablet int, audio []byte) (string, []byte, error) {
	n := 1 + rng.Intn(4)
	var msgs []map[string]any
	for i := 0; i < n; i++ {
		msgs = append(msgs, map[string]any{"role": "speaker", "content": lines[rng.Intn(len(lines))]})
		if i < n-1 {
			msgs = append(msgs, map[string]any{"role": "disabled_person", "content": replies[rng.Intn(len(replies))]})
		}
	}
	if audio != nil {
		msgs[len(msgs)-1] = map[string]any{"role": "speaker", "audio": true}
	}
	payload, err := json.Marshal(map[string]any{
		"messages":                  msgs,
		"disabled_person_biography": "Retired teacher, likes gardening and football.",
		"language":                  "en",
		"user_id":                   fmt.Sprintf("loadtest-user-%02d", tablet),
		"dialog_id":                 fmt.Sprintf("loadtest-dialog-%02d", tablet),
		"options":                   map[string]any{"max_candidates": 3},
	})
	if err != nil {
		return "", nil, err
	}
	ct, body := replydproc.InferForm(payload, audio)
	return ct, body, nil
}

// retryAfter reads Retry-After seconds, bounded to [0.2 s, 2 s].
func retryAfter(h http.Header) time.Duration {
	d := time.Second
	if n, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
		d = time.Duration(n) * time.Second
	}
	return min(max(d, 200*time.Millisecond), 2*time.Second)
}

// tablet sends requests until ctx ends.
func tablet(ctx context.Context, cfg config, c *client, i int, key string, wav []byte, res *results) {
	rng := rand.New(rand.NewSource(cfg.seed*1000 + int64(i)))
	adminPaths := []struct{ route, path string }{
		{routeLogs, "/v1/admin/logs?window=1h&limit=100"},
		{routeStats, "/v1/admin/stats?window=1h"},
		{routeKeys, "/v1/admin/keys?limit=100"},
	}
	// With a think time, tablets start at random offsets within one think
	// time and pause a jittered think time (0.5x to 1.5x), so that they do
	// not fire in lockstep as a real clinic's tablets do not.
	pause := func() time.Duration {
		if cfg.think <= 0 {
			return 0
		}
		return time.Duration((0.5 + rng.Float64()) * float64(cfg.think))
	}
	if cfg.think > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(rng.Int63n(int64(cfg.think)))):
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		var o outcome
		var wait time.Duration
		switch p := rng.Float64(); {
		case p < cfg.adminShare:
			a := adminPaths[n%len(adminPaths)]
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+a.path, nil)
			if err != nil {
				return
			}
			req.Header.Set("X-ADMIN-KEY", c.adminKey)
			o, _ = c.do(req, a.route)
		default:
			var audio []byte
			route := routeInfer
			if p < cfg.adminShare+cfg.audioShare {
				audio, route = wav, routeInferAudio
			}
			ct, body, err := inferBody(rng, i, audio)
			if err != nil {
				res.add(outcome{route: route, err: err})
				return
			}
			// The request is not tied to ctx: a request sent before the
			// end of the run is let finish, so that every answer the
			// server gives is counted.
			req, err := http.NewRequest(http.MethodPost, c.base+"/v1/infer", bytes.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-API-KEY", key)
			start := time.Now()
			resp, err := c.http.Do(req)
			if err != nil {
				o = outcome{route: route, err: err, latency: time.Since(start)}
				break
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			o = outcome{route: route, status: resp.StatusCode, latency: time.Since(start)}
			o.noSpeech = resp.StatusCode == http.StatusOK && noSpeechAnswer(b)
			if resp.StatusCode >= 400 {
				var e struct {
					Error string `json:"error"`
				}
				if json.Unmarshal(b, &e) == nil {
					o.code = e.Error
				}
			}
			if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests {
				wait = retryAfter(resp.Header)
			}
		}
		if errors.Is(o.err, context.Canceled) {
			return // an admin read cut by the end of the run is not a result
		}
		res.add(o)
		if d := wait + pause(); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// drive creates the keys, runs the tablets and then reconciles the logs.
func drive(ctx context.Context, cfg config, base, adminKey string, stdout io.Writer) (*results, error) {
	c := newClient(base, adminKey, cfg.tablets)
	keys := make([]string, cfg.tablets)
	for i := range keys {
		k, err := c.createKey(ctx, i)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	wav := testaudio.Mono16(16000, testaudio.Voiced(2, 16000))
	res := newResults()
	res.switching = cfg.switchEvery > 0
	// since has whole-second resolution: start the window at a second
	// boundary before the first request.
	res.started = time.Now().UTC().Truncate(time.Second)
	time.Sleep(time.Until(res.started.Add(time.Second)))
	fmt.Fprintf(stdout, "%d tablets for %s against %s (%.0f%% infer with audio, %.0f%% admin reads)\n",
		cfg.tablets, cfg.duration, base, 100*cfg.audioShare, 100*cfg.adminShare)

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tablet(runCtx, cfg, c, i, keys[i], wav, res)
		}(i)
	}
	if res.switching {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switcher(runCtx, cfg, c, res)
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	reconcile(ctx, c, res)
	if res.switching {
		c.byModel(ctx, res)
	}
	return res, nil
}

// getJSON GETs an admin path and decodes a 200 answer into v; any other
// status is an error carrying the body.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	o, body, err := c.admin(ctx, http.MethodGet, path, nil)
	switch {
	case err != nil:
		return err
	case o.status != http.StatusOK:
		return fmt.Errorf("%d %s", o.status, body)
	default:
		return json.Unmarshal(body, v)
	}
}

// reconcile counts the infer calls replyd recorded in the run's window. The
// log entry of a call is written right after its answer is sent, so the
// counts are polled until they settle (30 s at most).
func reconcile(ctx context.Context, c *client, res *results) {
	since := url.QueryEscape(res.started.Format(time.RFC3339))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct {
			TotalRequests int `json:"total_requests"`
		}
		if res.statsErr = c.getJSON(ctx, "/v1/admin/stats?since="+since, &st); res.statsErr == nil {
			res.statsTotal = st.TotalRequests
		}
		var lg struct {
			Count int `json:"count"`
		}
		if res.logsErr = c.getJSON(ctx, "/v1/admin/logs?stream=infer&limit=1000&since="+since, &lg); res.logsErr == nil {
			res.loggedInfer = lg.Count
			res.loggedLimited = lg.Count >= 1000
		}
		settled := res.statsErr == nil && res.statsTotal >= res.inferResponses &&
			res.logsErr == nil && (res.loggedLimited || res.loggedInfer >= res.inferResponses)
		if settled || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
