package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// liveSessions are the open sessions, for the per-address bound, the
// shutdown and the per-key switch.
type liveSessions struct {
	mu      sync.Mutex
	all     map[*liveSession]struct{}
	perAddr map[string]int
	closed  bool
}

func newLiveSessions() *liveSessions {
	return &liveSessions{all: map[*liveSession]struct{}{}, perAddr: map[string]int{}}
}

// add registers sess from addr, or refuses it: 429 when addr holds max
// sessions, 503 while the server shuts down.
func (l *liveSessions) add(sess *liveSession, addr string, max int, retry time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return &Error{Code: CodeNotReady, Message: "the server is shutting down; reconnect shortly", RetryAfter: retry}
	}
	if l.perAddr[addr] >= max {
		return &Error{Code: CodeRateLimited, Message: fmt.Sprintf("this address already has %d live sessions open", max), RetryAfter: retry}
	}
	l.perAddr[addr]++
	l.all[sess] = struct{}{}
	return nil
}

// activate gives sess its connection, under the lock that each reads
// it with; false when the server began shutting down meanwhile.
func (l *liveSessions) activate(sess *liveSession, conn *websocket.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sess.conn = conn
	sess.ctx, sess.cancel = context.WithCancelCause(context.Background())
	return !l.closed
}

func (l *liveSessions) remove(sess *liveSession, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.all[sess]; !ok {
		return
	}
	delete(l.all, sess)
	if l.perAddr[addr]--; l.perAddr[addr] <= 0 {
		delete(l.perAddr, addr)
	}
}

// each calls fn for every open session matching keep (nil: all).
func (l *liveSessions) each(keep func(*liveSession) bool, fn func(*liveSession)) {
	l.mu.Lock()
	list := make([]*liveSession, 0, len(l.all))
	for s := range l.all {
		if s.conn != nil && (keep == nil || keep(s)) {
			list = append(list, s)
		}
	}
	l.mu.Unlock()
	for _, s := range list {
		fn(s)
	}
}

// count returns the open sessions.
func (l *liveSessions) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// CloseLive closes every live session with 1001 (going away) and refuses
// new ones: the server is shutting down. The page reconnects to whichever
// box then answers. HTTPServer registers it with RegisterOnShutdown;
// http.Server.Shutdown does not track hijacked connections itself.
func (s *Server) CloseLive() {
	s.live.mu.Lock()
	s.live.closed = true
	s.live.mu.Unlock()
	var wg sync.WaitGroup
	s.live.each(nil, func(sess *liveSession) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.end(websocket.StatusGoingAway, "the server is shutting down; reconnect")
		}()
	})
	wg.Wait()
}
