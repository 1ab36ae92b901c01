package api

// Admitting a request, and what one client can hold before any work is
// done: a key's scope and rate limit (counted by the store, so that boxes
// sharing PostgreSQL share it), its requests in flight, the upload memory
// bodies hold, the time a slow body may take, and connections per address.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/window"
	"github.com/replyd/replyd/store"
)

// Rate-limit budgets: each key has one of rate_limit_per_minute requests
// for inferences and another, as large, for feedback, so that reporting an
// outcome never costs an inference.
const (
	budgetInfer    = ""
	budgetFeedback = "#feedback"
)

// budgetExceeded is the message of a 429 per budget.
var budgetExceeded = map[string]string{
	budgetInfer:    "rate limit of %d requests per minute exceeded for this API key; retry in %d s",
	budgetFeedback: "feedback rate limit of %d reports per minute exceeded for this API key; retry in %d s",
}

// admit checks the key's scope and its rate limit in budget (the box's own,
// or the one shared through PostgreSQL), and records its use (at most once a
// minute per key). A request of budgetInfer that ends shed (503) is given
// back (refundIfShed).
func (s *Server) admit(c echo.Context, key store.APIKey, budget string) error {
	if !slices.Contains(key.Scopes, ScopeInfer) {
		return errorf(CodeForbidden, "this API key lacks the scope %q", ScopeInfer)
	}
	now := s.now()
	ok, retry, err := s.store.Allow(key.Hash+budget, key.RateLimitPerMinute, now)
	if err != nil {
		return err
	}
	if !ok {
		s.metrics.rateLimited.Inc()
		return &Error{
			Code:       CodeRateLimited,
			Message:    fmt.Sprintf(budgetExceeded[budget], key.RateLimitPerMinute, retryAfterSeconds(retry)),
			RetryAfter: retry,
		}
	}
	// The store persists "last used" at most once a minute (the one place
	// that rule lives); the calls in between cost a map lookup.
	if err := s.store.TouchKey(key.Hash, now); err != nil {
		s.reqLogger(c).Warn("recording the key's last use failed", "error", err.Error())
	}
	return nil
}

// enterInflight admits one more inference of key unless MaxInflightPerKey
// are in progress (429). On success the caller must call release when the
// request ends.
func (s *Server) enterInflight(key store.APIKey) (release func(), err error) {
	if !s.inflight.enter(key.Hash, s.limits.MaxInflightPerKey) {
		s.metrics.rateLimited.Inc()
		return nil, &Error{
			Code:       CodeRateLimited,
			Message:    fmt.Sprintf("this API key already has %d requests in progress; retry when one has finished", s.limits.MaxInflightPerKey),
			RetryAfter: time.Second,
		}
	}
	return func() { s.inflight.leave(key.Hash) }, nil
}

// refundIfShed gives the request back to the key's inference budget when it
// ended in a 503 (overloaded, not ready, timeout): the client is told to
// retry, and the retry must not find the limit used up by requests replyd
// refused.
func (s *Server) refundIfShed(keyHash string, errp *error) {
	if *errp == nil || toAPIError(*errp).Status() != http.StatusServiceUnavailable {
		return
	}
	if err := s.store.Refund(keyHash+budgetInfer, s.now()); err != nil {
		s.log.Warn("giving a shed request back to the rate limit failed", "error", err.Error())
	}
}

// uploadBudget bounds the request bodies held in memory at once, in bytes.
// Bodies are read into memory (the audio decoders need all of it), so
// without it 25 concurrent 25 MiB uploads would hold 625 MiB before a single
// one is admitted to speech-to-text. It is safe for concurrent use.
type uploadBudget struct {
	mu    sync.Mutex
	avail int64
}

// take reserves n bytes, or reports false when they are not free now.
func (b *uploadBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.avail {
		return false
	}
	b.avail -= n
	return true
}

// available returns the bytes not reserved now.
func (b *uploadBudget) available() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.avail
}

func (b *uploadBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.avail += n
}

// budgetChunk is how much budgetReader reserves at a time for a body of
// unknown length.
const budgetChunk = 256 << 10

// budgetReader reserves upload budget as a body of unknown length (chunked)
// is read, and fails with errUploadsFull when none is left.
type budgetReader struct {
	r          io.Reader
	b          *uploadBudget
	chunk      int64
	held, read int64
}

func (br *budgetReader) Read(p []byte) (int, error) {
	if br.read+int64(len(p)) > br.held {
		need := max(br.chunk, br.read+int64(len(p))-br.held)
		if !br.b.take(need) {
			return 0, errUploadsFull
		}
		br.held += need
	}
	n, err := br.r.Read(p)
	br.read += int64(n)
	return n, err
}

// errUploadsFull answers a body that finds the upload budget spent.
var errUploadsFull = &Error{Code: CodeOverloaded, Message: "too many uploads are being received; retry shortly"}

// reserveUpload takes the request's declared length from the upload budget
// (failing at once, before the body is read, when it is not free), or, for
// a body of unknown length, makes the body reserve as it is read. The caller
// must call the returned release when it no longer holds the body.
func (s *Server) reserveUpload(r *http.Request) (release func(), err error) {
	if r.ContentLength >= 0 {
		n := r.ContentLength
		if !s.uploads.take(n) {
			e := *errUploadsFull
			e.RetryAfter = s.limits.OverloadedRetryAfter
			return nil, &e
		}
		return func() { s.uploads.give(n) }, nil
	}
	br := &budgetReader{r: r.Body, b: s.uploads, chunk: min(budgetChunk, s.limits.MaxBodyBytes)}
	r.Body = readCloser{br, r.Body}
	return func() { s.uploads.give(br.held) }, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// keyInflight counts the requests in flight per API key. It is safe for
// concurrent use.
type keyInflight struct {
	mu sync.Mutex
	n  map[string]int
}

// enter admits one more request of key unless max are in flight.
func (k *keyInflight) enter(key string, max int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key] >= max {
		return false
	}
	k.n[key]++
	return true
}

func (k *keyInflight) leave(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key]--; k.n[key] <= 0 {
		delete(k.n, key)
	}
}

// slowBody cuts a request body that arrives slower than MinBodyRate once
// BodyRateGrace has passed: a client trickling bytes would otherwise hold a
// connection and its memory for the whole read timeout. The cut is 408
// request_timeout. It works through read deadlines on the connection, so
// that a client that sends nothing at all is cut too. An error answer to a
// request whose body was not read to its end carries Connection: close
// (HTTP/1.x), so that it is sent at once and the connection given back.
func (s *Server) slowBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		rc := http.NewResponseController(c.Response())
		start := time.Now()
		g := &rateGuard{r: r.Body, rc: rc, start: start, grace: s.limits.BodyRateGrace,
			rate: s.limits.MinBodyRate, cap: start.Add(s.limits.RequestReadTimeout)}
		r.Body = readCloser{g, r.Body}
		if r.ProtoMajor == 1 {
			res := c.Response()
			res.Before(func() {
				if res.Status >= 400 && !g.bodyRead() {
					// Refused before its body was read (or while reading
					// it): answered at once, and the connection closed
					// after the answer. Without it net/http reads up to
					// 256 KiB of the unread body before writing the
					// answer, at whatever pace the client sends it: a
					// refused slow upload held its connection and its
					// goroutine for the whole read timeout. HTTP/2 resets
					// the stream of an answered request instead.
					res.Header().Set(echo.HeaderConnection, "close")
					g.refused()
				}
			})
		}
		err := next(c)
		g.done()
		return err
	}
}

// rateGuard sets, before each read, the deadline by which the next byte
// must arrive: grace, plus the bytes so far at the minimum rate.
type rateGuard struct {
	r          io.Reader
	rc         *http.ResponseController
	start, cap time.Time
	grace      time.Duration
	rate       int64 // bytes per second

	mu       sync.Mutex
	read     int64
	eof      bool // the body was read to its end
	cut      bool // the body was cut for arriving too slowly
	closing  bool // an error answer closes the connection (refused)
	finished bool
}

func (g *rateGuard) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.finished {
		g.mu.Unlock()
		return 0, io.EOF
	}
	dl := g.start.Add(g.grace + time.Duration((g.read+1)*int64(time.Second)/g.rate))
	if dl.After(g.cap) {
		dl = g.cap
	}
	// Not every ResponseWriter has a connection (tests); the cut is then
	// checked after each read only.
	armed := g.rc.SetReadDeadline(dl) == nil
	g.mu.Unlock()

	n, err := g.r.Read(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.read += int64(n)
	switch {
	case err == io.EOF:
		g.eof = true
		if armed {
			// No deadline once the body is read: net/http then watches the
			// connection for the client going away, and a read deadline
			// expiring while the handler runs would look like that and
			// cancel the request (a long inference would be cut at
			// Limits.RequestReadTimeout). The request's own deadline bounds it.
			_ = g.rc.SetReadDeadline(time.Time{})
		}
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(g.cap):
		return n, g.tooSlow()
	case err == nil && !armed && time.Now().After(dl):
		return n, g.tooSlow()
	}
	return n, err
}

// bodyRead reports whether the body was read to its end.
func (g *rateGuard) bodyRead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.eof
}

// refused marks a body that will not be read: its answer closes the
// connection. The deadline goes to the past, so that net/http, which reads
// up to 256 KiB of an unread body when it closes it after the answer, gives
// the connection back at once.
func (g *rateGuard) refused() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	_ = g.rc.SetReadDeadline(time.Now())
}

// tooSlow marks the body cut. The deadline stays in the past, so that the
// server does not wait for the rest of the body before answering.
func (g *rateGuard) tooSlow() error {
	g.cut = true
	_ = g.rc.SetReadDeadline(time.Now())
	return &Error{Code: CodeRequestTimeout, Message: fmt.Sprintf(
		"the request body arrived slower than %s/s after the first %s and was cut", formatBytes(g.rate), g.grace)}
}

// postHandlerRead is how much of an unread body net/http reads after the
// handler returns (its maxPostHandlerReadBytes), to keep the connection.
const postHandlerRead = 256 << 10

// done sets the deadline for what the server reads after the handler: none
// once the body was read (Read cleared it); for an unread rest, the time it
// takes at the minimum rate, so that a trickling client cannot hold the
// answer back; nothing new after a cut.
func (g *rateGuard) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished = true
	switch {
	case g.cut, g.closing:
	case g.eof:
		// The body was read: nothing more is read for this request; the
		// server sets its own deadlines for the next one.
	default:
		dl := time.Now().Add(time.Duration(postHandlerRead * int64(time.Second) / g.rate))
		if dl.After(g.cap) {
			dl = g.cap
		}
		_ = g.rc.SetReadDeadline(dl)
	}
}

// Listener wraps ln so that one client address holds at most
// Limits.MaxConnsPerAddr connections at once: a further connection from it
// is closed at once. Connections from trusted proxies are not counted (they
// carry many clients); nor are those whose address cannot be read.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: s.limits.MaxConnsPerAddr, trusted: s.trusted, n: map[string]int{}, log: s.log}
}

type limitListener struct {
	net.Listener
	max     int
	trusted []*net.IPNet
	log     interface{ Debug(string, ...any) }

	mu sync.Mutex
	n  map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := l.key(c.RemoteAddr())
		if key == "" {
			return c, nil
		}
		l.mu.Lock()
		if l.n[key] >= l.max {
			l.mu.Unlock()
			l.log.Debug("connection refused: too many from one address", "client", key)
			_ = c.Close()
			continue
		}
		l.n[key]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *limitListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key]--; l.n[key] <= 0 {
		delete(l.n, key)
	}
}

// key is the counting unit of a peer (addrBucket), or "" for a trusted proxy.
func (l *limitListener) key(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return ""
	}
	for _, n := range l.trusted {
		if n.Contains(ta.IP) {
			return ""
		}
	}
	return addrBucket(canonicalAddr(ta.IP.String()))
}

// countedConn gives its slot back once, when closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// refusalLog counts, per key, the refusals by its rate limit that were
// logged, so that a key holder flooding past its limit adds at most one log
// entry a window (the refusals are still counted in the metrics).
type refusalLog struct {
	mu     sync.Mutex
	logged window.Counter[struct{}]
}

// first reports whether a refusal of key at now is the first to be logged
// in a window, and counts it if so.
func (r *refusalLog) first(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logged.Length = store.RateWindow
	r.logged.Prune(now)
	ok, _ := r.logged.Allow(key, 1, now)
	return ok
}
