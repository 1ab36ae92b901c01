package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
)

// TestUploadBudget: bodies that do not fit in the upload memory are refused
// with 503 before they are read, and given back to the key's rate limit.
func TestUploadBudget(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxBodyBytes = 64 << 10; o.Limits.UploadMemoryBytes = 100 << 10 })
	e.addKey("valid", 2)
	hold := make(chan struct{})
	e.inf.fn = func(ctx context.Context, r engine.Request) (engine.Result, error) {
		<-hold
		return echoInferer(ctx, r)
	}
	body := make([]byte, 60<<10)
	first := make(chan int)
	big := inferReq(t, "valid", payloadPart(simplePayload), audioPart(body))
	go func() { first <- e.do(big).Code }()
	waitFor(t, func() bool { return e.srv.uploads.available() < 50<<10 })
	// The second large body does not fit: 503 at once, before its body.
	rec := e.do(inferReq(t, "valid", payloadPart(simplePayload), audioPart(body)))
	wantJSON(t, rec, 503, errJSON("overloaded", "too many uploads are being received; retry shortly"))
	if rec.Header().Get("Retry-After") != "2" {
		t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
	}
	// A small text-only request still fits.
	small := inferReq(t, "valid", payloadPart(simplePayload))
	go func() { first <- e.do(small).Code }()
	close(hold)
	for i := 0; i < 2; i++ {
		if code := <-first; code != 200 {
			t.Errorf("admitted request: %d", code)
		}
	}
	// The 503 was refunded: the key's limit of 2 a minute allowed both.
	if e.srv.uploads.available() != 100<<10 {
		t.Errorf("upload budget %d after all requests, want it whole", e.srv.uploads.avail)
	}
	// Chunked bodies reserve as they are read.
	req := inferReq(t, "valid", payloadPart(simplePayload), audioPart(body))
	req.ContentLength = -1
	e.clock.Advance(time.Minute)
	if rec := e.do(req); rec.Code != 200 {
		t.Errorf("chunked request: %d %s", rec.Code, rec.Body)
	}
}

// TestKeyInflightBound: one key has at most MaxInflightPerKey requests in
// progress; more get 429 and do not count against its rate limit.
func TestKeyInflightBound(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxInflightPerKey = 2 })
	e.addKey("valid", 0)
	e.addKey("other", 0)
	hold := make(chan struct{})
	var started sync.WaitGroup
	started.Add(2)
	e.inf.fn = func(ctx context.Context, r engine.Request) (engine.Result, error) {
		started.Done()
		<-hold
		return echoInferer(ctx, r)
	}
	codes := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() { codes <- e.do(inferReq(t, "valid", payloadPart(simplePayload))).Code }()
	}
	started.Wait()
	wantJSON(t, e.do(inferReq(t, "valid", payloadPart(simplePayload))), 429, errJSON("rate_limited", "this API key already has 2 requests in progress; retry when one has finished"))
	// Another key is not held back.
	e.inf.fn = echoInferer
	if rec := e.do(inferReq(t, "other", payloadPart(simplePayload))); rec.Code != 200 {
		t.Errorf("another key: %d", rec.Code)
	}
	close(hold)
	for i := 0; i < 2; i++ {
		if c := <-codes; c != 200 {
			t.Errorf("held request: %d", c)
		}
	}
	if rec := e.do(inferReq(t, "valid", payloadPart(simplePayload))); rec.Code != 200 {
		t.Errorf("after the others finished: %d", rec.Code)
	}
}

// TestShedRequestsAreRefunded: a 503 does not use up the key's limit.
func TestShedRequestsAreRefunded(t *testing.T) {
	e := newEnv(t)
	e.addKey("valid", 2)
	e.inf.fn = func(context.Context, engine.Request) (engine.Result, error) {
		return engine.Result{}, engine.ErrOverloaded
	}
	for i := 0; i < 5; i++ {
		if rec := e.do(inferReq(t, "valid", payloadPart(simplePayload))); rec.Code != 503 {
			t.Fatalf("shed request %d: %d", i, rec.Code)
		}
	}
	e.inf.fn = echoInferer
	for i := 0; i < 2; i++ {
		if rec := e.do(inferReq(t, "valid", payloadPart(simplePayload))); rec.Code != 200 {
			t.Fatalf("request %d after five shed ones: %d %s", i, rec.Code, rec.Body)
		}
	}
	if rec := e.do(inferReq(t, "valid", payloadPart(simplePayload))); rec.Code != 429 {
		t.Errorf("third request in the minute: %d, want 429", rec.Code)
	}
}

// realServer serves e's handler on a loopback listener wrapped by Listener,
// with the timeouts of HTTPServer.
func realServer(t *testing.T, e *env) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := e.srv.HTTPServer(ln.Addr().String())
	go func() { _ = hs.Serve(e.srv.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// TestSlowBodyIsCut: a body that trickles below MinBodyRate after the grace
// is cut with 408, and so is one that stops; a body at the rate is not.
func TestSlowBodyIsCut(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Limits.BodyRateGrace = 300 * time.Millisecond
		o.Limits.MinBodyRate = 8 << 10
	})
	e.addKey("valid", 0)
	addr := realServer(t, e)
	post := func(t *testing.T, body func(w *bufio.Writer)) (int, string, time.Duration) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		w := bufio.NewWriter(conn)
		fmt.Fprintf(w, "POST /v1/infer HTTP/1.1\r\nHost: x\r\nX-API-KEY: valid\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n")
		w.Flush()
		go body(w)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	const msg = `{"error":"request_timeout","message":"the request body arrived slower than 8 KiB/s after the first 300ms and was cut"}`
	t.Run("trickle", func(t *testing.T) {
		code, body, took := post(t, func(w *bufio.Writer) {
			for i := 0; i < 1000; i++ {
				if _, err := w.WriteString("--"); err != nil || w.Flush() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		if code != 408 || strings.TrimSpace(body) != msg || took > 5*time.Second {
			t.Errorf("trickled body: %d %s after %s", code, body, took)
		}
	})
	t.Run("silence", func(t *testing.T) {
		code, body, took := post(t, func(w *bufio.Writer) {})
		if code != 408 || strings.TrimSpace(body) != msg || took > 5*time.Second {
			t.Errorf("silent body: %d %s after %s", code, body, took)
		}
	})
	t.Run("steady", func(t *testing.T) {
		// 20 KiB/s: above the minimum; the body is malformed on purpose,
		// so the answer is a 400 from the multipart reader, not a 408.
		code, body, _ := post(t, func(w *bufio.Writer) {
			chunk := strings.Repeat("x", 2<<10)
			for sent := 0; sent < 100000; sent += len(chunk) {
				if sent+len(chunk) > 100000 {
					chunk = chunk[:100000-sent]
				}
				if _, err := w.WriteString(chunk); err != nil || w.Flush() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		if code != 400 {
			t.Errorf("steady body: %d %s", code, body)
		}
	})
	// A request whose body was read in time keeps its connection watched
	// normally afterwards: a slow inference is not cut.
	if code, body := slowInference(t, e, addr, time.Second); code != 200 {
		t.Errorf("an inference that outlasts the body's deadline: %d %s", code, body)
	}
}

// slowInference makes e's inferences take d and sends one to the real
// server at addr; it returns the answer's status and body.
func slowInference(t *testing.T, e *env, addr string, d time.Duration) (int, string) {
	t.Helper()
	e.inf.fn = func(ctx context.Context, r engine.Request) (engine.Result, error) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
		return echoInferer(ctx, r)
	}
	req := inferReq(t, "valid", payloadPart(simplePayload))
	req.URL.Scheme, req.URL.Host, req.RequestURI = "http", addr, ""
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestInferenceOutlastsReadTimeout: the server's whole-request read bound
// (http.Server's ReadTimeout) ends with the body: an inference that runs on
// past it is answered, not cancelled as if the client had gone (net/http's
// background read would report the expired deadline as a closed connection).
func TestInferenceOutlastsReadTimeout(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	e := newEnv(t, func(o *Options) { o.Limits.RequestReadTimeout = readTimeout })
	e.addKey("valid", 0)
	addr := realServer(t, e)
	if code, body := slowInference(t, e, addr, 4*readTimeout); code != 200 {
		t.Errorf("an inference that outlasts the read timeout: %d %s", code, body)
	}
}

// TestConnectionsPerAddress: one address holds at most MaxConnsPerAddr
// connections; the next is closed at once, and a slot frees when one closes.
func TestConnectionsPerAddress(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxConnsPerAddr = 3 })
	addr := realServer(t, e)
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		defer c.Close()
	}
	closedAtOnce := func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		return err == io.EOF || (err != nil && !isTimeout(err))
	}
	if !closedAtOnce() {
		t.Error("a fourth connection from one address was kept")
	}
	conns[0].Close()
	time.Sleep(100 * time.Millisecond) // the server notices the close
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
	resp.Body.Close()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
