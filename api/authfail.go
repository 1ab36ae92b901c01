package api

// Failed authentication costs no disk: it is counted in memory per client
// address and written as at most one aggregated log entry per address per
// minute; past a few failures a minute, an address's further failures are
// answered 429 without a store lookup's side effects or a KDF run.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/window"
	"github.com/replyd/replyd/store"
)

// Kinds of failed authentication, as the aggregated log entry names them.
const (
	failAPIKey      = "api key"
	failAdmin       = "admin credential"
	failLoginCode   = "login code"
	failPairingCode = "pairing code"
	failLiveTicket  = "live ticket"
)

// authFailWindow is the counting window of failed authentication.
const authFailWindow = time.Minute

// maxTrackedAddrs bounds the addresses counted one by one; failures from
// further addresses in the same minute are counted together, so that an
// attacker with many addresses cannot grow the map or the log.
const maxTrackedAddrs = 1024

// authFailures counts failed authentication per client address (IPv6 by /64:
// one host owns a whole /64) in fixed one-minute windows. It is safe for
// concurrent use.
type authFailures struct {
	mu    sync.Mutex
	limit int                          // failures in a window after which the address is throttled
	addrs *window.Counter[failKinds]   // by address (or /64)
	other *window.Counter[*otherAddrs] // addresses beyond maxTrackedAddrs, under one key
}

// failKinds counts a window's failures by kind.
type failKinds map[string]int

// otherAddrs are the failures of addresses beyond maxTrackedAddrs.
type otherAddrs struct {
	kinds failKinds
	addrs map[string]struct{} // distinct addresses, bounded
}

// otherKey is the one key of authFailures.other.
const otherKey = "other addresses"

// failSummary is one aggregated log entry.
type failSummary struct {
	addr    string
	count   int
	nAddrs  int // for the "other addresses" entry
	byKind  map[string]int
	started time.Time
}

func newAuthFailures(limit int) *authFailures {
	return &authFailures{limit: limit, addrs: window.New[failKinds](authFailWindow), other: window.New[*otherAddrs](authFailWindow)}
}

// blocked reports whether addr has used up its failures in the current
// window, and how long until the window closes.
func (f *authFailures) blocked(addr string, now time.Time) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.addrs.Current(addrBucket(addr), now)
	if w == nil || w.N < f.limit {
		return false, 0
	}
	return true, f.addrs.Left(w, now)
}

// record counts one failure of kind from addr. It returns the summaries of
// windows that have closed and must now be logged.
func (f *authFailures) record(addr, kind string, now time.Time) []failSummary {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.closed(now, false)
	key := addrBucket(addr)
	if f.addrs.Current(key, now) == nil && f.addrs.Len() >= maxTrackedAddrs {
		w := f.other.Add(otherKey, now)
		if w.Data == nil {
			w.Data = &otherAddrs{kinds: failKinds{}, addrs: map[string]struct{}{}}
		}
		w.Data.kinds[kind]++
		if len(w.Data.addrs) < maxTrackedAddrs {
			w.Data.addrs[key] = struct{}{}
		}
		return out
	}
	w := f.addrs.Add(key, now)
	if w.Data == nil {
		w.Data = failKinds{}
	}
	w.Data[kind]++
	return out
}

// flush returns the summaries of the closed windows (all windows when all
// is set: at shutdown) and forgets them.
func (f *authFailures) flush(now time.Time, all bool) []failSummary {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed(now, all)
}

// pending reports whether any window is still open.
func (f *authFailures) pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs.Len() > 0 || f.other.Len() > 0
}

// closed removes and summarises the windows that ended by now. The caller
// holds f.mu.
func (f *authFailures) closed(now time.Time, all bool) []failSummary {
	var out []failSummary
	f.addrs.Close(now, all, func(addr string, w *window.Window[failKinds]) {
		out = append(out, failSummary{addr: addr, count: w.N, byKind: w.Data, started: w.Start})
	})
	f.other.Close(now, all, func(_ string, w *window.Window[*otherAddrs]) {
		out = append(out, failSummary{addr: otherKey, count: w.N, nAddrs: len(w.Data.addrs), byKind: w.Data.kinds, started: w.Start})
	})
	slices.SortFunc(out, func(a, b failSummary) int { return a.started.Compare(b.started) })
	return out
}

// message is the aggregated log entry's text.
func (s failSummary) message() string {
	kinds := make([]string, 0, len(s.byKind))
	for k, n := range s.byKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	from := s.addr
	if s.nAddrs > 0 {
		from = fmt.Sprintf("%d other addresses", s.nAddrs)
	}
	return fmt.Sprintf("%d failed authentications from %s in one minute (%s)", s.count, from, strings.Join(kinds, ", "))
}

// authFailed records a failed authentication of kind from the request's
// client address and writes the log entries of windows that have closed.
// When the address has used up its failures for the minute it returns the
// 429 to answer instead of the 401 (logged at debug level only: a flood of
// them must not flood the journal either); otherwise nil.
func (s *Server) authFailed(c echo.Context, kind string) *Error {
	addr := ClientAddr(c)
	blocked, retry := s.failures.blocked(addr, s.now())
	s.countFailure(addr, kind)
	if blocked {
		quietAccessLog(c)
		return s.authThrottled(retry)
	}
	return nil
}

// countFailure counts a failed authentication for the aggregated log and
// the metrics.
func (s *Server) countFailure(addr, kind string) {
	s.writeFailSummaries(s.failures.record(addr, kind, s.now()))
	s.metrics.authFailures.WithLabelValues(kind).Inc()
	s.scheduleFailFlush()
}

// authThrottled is the 429 of an address past its failures.
func (s *Server) authThrottled(retry time.Duration) *Error {
	return &Error{
		Code:       CodeRateLimited,
		Message:    fmt.Sprintf("too many failed authentications from this address; retry in %d s", retryAfterSeconds(retry)),
		RetryAfter: retry,
	}
}

// throttledAddr returns the 429 for a request whose client address is past
// its failures, or nil. Checks that cost something (the admin key's KDF)
// run only after it.
func (s *Server) throttledAddr(c echo.Context) *Error {
	if blocked, retry := s.failures.blocked(ClientAddr(c), s.now()); blocked {
		quietAccessLog(c)
		return s.authThrottled(retry)
	}
	return nil
}

const quietKey = "replyd.quiet_access_log"

// quietAccessLog makes the access log line of this request debug level.
func quietAccessLog(c echo.Context) { c.Set(quietKey, true) }

// scheduleFailFlush makes sure a timer will log the current windows once
// they close, even if no further failure comes.
func (s *Server) scheduleFailFlush() {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failTimer != nil || s.closed {
		return
	}
	s.failTimer = time.AfterFunc(authFailWindow+time.Second, func() {
		s.failMu.Lock()
		s.failTimer = nil
		s.failMu.Unlock()
		s.writeFailSummaries(s.failures.flush(s.now(), false))
		if s.failures.pending() {
			s.scheduleFailFlush()
		}
	})
}

// writeFailSummaries appends one warn entry per summary to the auth stream,
// stamped with the end of its window (or now, at shutdown).
func (s *Server) writeFailSummaries(sums []failSummary) {
	now := s.now()
	for _, sum := range sums {
		ts := sum.started.Add(authFailWindow)
		if ts.After(now) {
			ts = now
		}
		e := store.LogEntry{
			Timestamp:    ts,
			Level:        store.LevelWarn,
			Message:      sum.message(),
			ResourceType: store.ResourceClient,
			ResourceID:   sum.addr,
			StreamName:   store.StreamAuth,
			Node:         s.node,
		}
		if err := s.store.AppendLog(e); err != nil {
			s.log.Error("appending the failed-authentication log entry failed", "error", err.Error())
		}
	}
}
