package api

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusedBodyLen is the length of the trickled bodies: under net/http's
// 256 KiB post-handler read, which it would otherwise wait for.
const refusedBodyLen = 96_000

// refusedEnv is a server whose /v1/infer refuses, before reading the body,
// with each of 401, 403, 413, 429 and 503, and the header of a request
// refused each way.
func refusedEnv(t *testing.T) (*env, map[int]string) {
	e := newEnv(t, func(o *Options) {
		o.Limits.MaxBodyBytes = 128 << 10
		o.Limits.UploadMemoryBytes = 100 << 10
	})
	e.addKey("limited", 1)
	e.addKey("noscope", 0, "other")
	e.addKey("valid", 0)
	// The limited key's one request of the minute.
	if rec := e.do(inferReq(t, "limited", payloadPart(simplePayload))); rec.Code != 200 {
		t.Fatalf("first request: %d %s", rec.Code, rec.Body)
	}
	return e, map[int]string{
		401: "X-API-KEY: wrong",
		403: "X-API-KEY: noscope",
		429: "X-API-KEY: limited",
		// 413 and 503 need the body's length: both are set apart below.
		413: "X-API-KEY: valid",
		503: "X-API-KEY: valid",
	}
}

// contentLength is the declared length of the refused request for status:
// over MaxBodyBytes for 413; within it but over the upload memory for 503.
func contentLength(status int) int {
	switch status {
	case 413:
		return 200_000
	case 503:
		return 110_000
	}
	return refusedBodyLen
}

// trickle writes n bytes to w at about 512 B/s until a write fails or stop
// is closed.
func trickle(w io.Writer, n int, stop <-chan struct{}) {
	chunk := []byte(strings.Repeat("-", 64))
	for sent := 0; sent < n; sent += len(chunk) {
		select {
		case <-stop:
			return
		case <-time.After(125 * time.Millisecond):
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// TestRefusedTrickleHTTP1: a request refused before its body is read is
// answered at once (long before the slow-body rule, 10 s, could cut it) with
// Connection: close, and the server closes the connection while the client
// is still trickling. Before, net/http first read up to 256 KiB of the
// unread body, at the client's 512 B/s.
func TestRefusedTrickleHTTP1(t *testing.T) {
	e, headers := refusedEnv(t)
	addr := realServer(t, e)
	for _, status := range []int{401, 403, 413, 429, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/infer HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n",
				headers[status], contentLength(status))
			stop := make(chan struct{})
			defer close(stop)
			go trickle(conn, contentLength(status), stop)
			_ = conn.SetReadDeadline(time.Now().Add(e.srv.limits.BodyRateGrace))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer before the slow-body grace: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			// ReadResponse takes "Connection: close" out into Close.
			if resp.StatusCode != status || !resp.Close {
				t.Errorf("answer %d (Connection: close %v) %s, want %d with Connection: close", resp.StatusCode, resp.Close, body, status)
			}
			// The server closed the connection: the next read ends.
			if _, err := br.ReadByte(); err == nil || isTimeout(err) {
				t.Errorf("the connection is still open after the answer: %v", err)
			}
		})
	}
}

// tlsServer serves e's handler over TLS with HTTP/2 (the timeouts of
// HTTPServer) and returns its URL and a client that speaks HTTP/2 to it.
func tlsServer(t *testing.T, e *env) (string, *http.Client) {
	t.Helper()
	hs := e.srv.HTTPServer("")
	ts := httptest.NewUnstartedServer(hs.Handler)
	ts.Config = hs
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return ts.URL, &http.Client{Transport: tr}
}

// TestRefusedTrickleHTTP2: over HTTP/2 (TLS on), a refused request's answer
// comes at once and its stream is reset, which ends the client's upload.
func TestRefusedTrickleHTTP2(t *testing.T) {
	e, headers := refusedEnv(t)
	url, client := tlsServer(t, e)
	for _, status := range []int{401, 403, 413, 429, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			pr, pw := io.Pipe()
			stop := make(chan struct{})
			defer close(stop)
			uploadEnded := make(chan struct{})
			go func() { trickle(pw, contentLength(status), stop); close(uploadEnded) }()
			ctx, cancel := context.WithTimeout(context.Background(), e.srv.limits.BodyRateGrace)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/infer", pr)
			req.ContentLength = int64(contentLength(status))
			req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
			k, v, _ := strings.Cut(headers[status], ": ")
			req.Header.Set(k, v)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("no answer before the slow-body grace: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != status {
				t.Errorf("answer %s %d %s, want HTTP/2 %d", resp.Proto, resp.StatusCode, body, status)
			}
			// The reset stream closes the request body: the upload ends.
			select {
			case <-uploadEnded:
			case <-ctx.Done():
				t.Errorf("the client was still uploading %s after the answer", e.srv.limits.BodyRateGrace)
			}
		})
	}
}

// TestParallelRefusedUploadsGiveBack: 20 slow uploads on one key that are
// refused (the key's rate limit) leave no goroutine or file descriptor
// behind: both are back to their idle count within 15 s. Before, of 20 such
// uploads 12 had no answer within 30 s and held their connections.
func TestParallelRefusedUploadsGiveBack(t *testing.T) {
	e, headers := refusedEnv(t)
	addr := realServer(t, e)
	// One connection first, so that the server's accept loop is running.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	idleG, idleFD := runtime.NumGoroutine(), openFDs(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/infer HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n",
				headers[429], refusedBodyLen)
			go func() { _, _ = io.Copy(io.Discard, conn) }() // reads the answer until the server closes
			trickle(conn, refusedBodyLen, nil)               // until the closed connection fails a write
		}()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, fd := runtime.NumGoroutine(), openFDs(t)
		if g <= idleG && fd <= idleFD {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after 20 refused slow uploads: %d goroutines (idle %d), %d fds (idle %d)", g, idleG, fd, idleFD)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
