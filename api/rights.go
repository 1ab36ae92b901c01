package api

// A key's end ends its work (issue 37). A request reads its key once, when
// it arrives; some work then lasts: a live session (for hours), a streamed
// or plain /v1/infer and a steered request (up to InferTimeout, queued
// work included), an admin page's try. Each such piece of work holds a
// grant here, by the key's hash, for as long as it runs. A grant ends, its
// work canceled and nothing more answered for it:
//
//   - at once on the box where the right was taken away (the key revoked,
//     live listening switched off for it): the handler re-checks the key's
//     grants before it answers (rightsChanged);
//   - on every other box sharing the store, at the latest KeyRecheck later:
//     while any grant is held, one goroutine re-reads the key of every
//     grant each KeyRecheck (one GetKey a key, and LiveOff for keys with
//     live sessions) and ends those whose right is gone; a live session
//     also re-reads its key at the start and the end of every turn;
//   - when the key cannot be read (the database is unreachable) for
//     rightsReadFailures re-checks in a row: a key can only be trusted
//     while its revocation can be read (docs/clustering.md).
//
// Nothing is cached: the bound is KeyRecheck plus one read of the store.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// CloseRevoked (4401) closes a live session whose API key was revoked or
// no longer exists, as 401 refuses its requests. A key that lost the scope
// infer or live listening is closed with CloseSwitchedOff (4403), as 403
// refuses them; a key that cannot be read for rightsReadFailures re-checks
// closes with 1013 (try again later).
const CloseRevoked websocket.StatusCode = 4401

// rightsReadFailures is how many re-checks in a row may fail to read a key
// before its work is ended with store_unavailable.
const rightsReadFailures = 3

// errRightEnded is the cause (Error.Err) of the error that ends work whose
// key lost its right.
var errRightEnded = errors.New("the API key's right ended while its work ran")

// rightKind is the right a grant needs.
type rightKind uint8

const (
	// rightInfer: the key is active and has the scope infer.
	rightInfer rightKind = iota
	// rightLive: rightInfer, and live listening is allowed for the key.
	rightLive
)

// grant is one piece of work that holds a key's right.
type grant struct {
	right rightKind
	end   func(*Error) // ends the work; called at most once
	once  sync.Once
}

func (g *grant) stop(e *Error) { g.once.Do(func() { g.end(e) }) }

// grants are the work in progress by key hash, and the goroutine that
// re-checks their keys while there is any.
type grants struct {
	mu       sync.Mutex
	by       map[string]map[*grant]struct{}
	failed   map[string]int // re-checks in a row that could not read the key
	watching bool
	stop     chan struct{} // closed when the last grant is released
}

func newGrants() *grants {
	return &grants{by: map[string]map[*grant]struct{}{}, failed: map[string]int{}}
}

// holdRight registers work of key hash that needs right r until release is
// called; end ends the work with the error that says why (it must not
// block). The first grant starts the re-check goroutine, which stops when
// none is left.
func (s *Server) holdRight(hash string, r rightKind, end func(*Error)) (release func()) {
	g := &grant{right: r, end: end}
	gs := s.rights
	gs.mu.Lock()
	m := gs.by[hash]
	if m == nil {
		m = map[*grant]struct{}{}
		gs.by[hash] = m
	}
	m[g] = struct{}{}
	if !gs.watching {
		gs.watching, gs.stop = true, make(chan struct{})
		go s.watchRights(gs.stop)
	}
	gs.mu.Unlock()
	return func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if m := gs.by[hash]; m != nil {
			delete(m, g)
			if len(m) == 0 {
				delete(gs.by, hash)
				delete(gs.failed, hash)
			}
		}
		if len(gs.by) == 0 && gs.watching {
			gs.watching = false
			close(gs.stop)
		}
	}
}

// watchRights re-checks every held key each KeyRecheck until stop is
// closed (no grant is held; the next grant starts another watcher).
func (s *Server) watchRights(stop <-chan struct{}) {
	t := time.NewTicker(s.limits.KeyRecheck)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.recheckRights()
		}
	}
}

// recheckRights re-checks the key of every grant once.
func (s *Server) recheckRights() {
	gs := s.rights
	gs.mu.Lock()
	hashes := make([]string, 0, len(gs.by))
	for h := range gs.by {
		hashes = append(hashes, h)
	}
	gs.mu.Unlock()
	for _, h := range hashes {
		s.rightsChanged(h)
	}
}

// rightsChanged re-reads key hash and ends the work it no longer has the
// right to. Handlers that take a right away call it before they answer, so
// that the work on this box ends at once.
func (s *Server) rightsChanged(hash string) {
	gs := s.rights
	gs.mu.Lock()
	list := make([]*grant, 0, len(gs.by[hash]))
	live := false
	for g := range gs.by[hash] {
		list = append(list, g)
		live = live || g.right == rightLive
	}
	gs.mu.Unlock()
	if len(list) == 0 {
		return
	}
	inferGone, liveGone, err := s.keyRights(hash, live)
	gs.mu.Lock()
	if err != nil {
		gs.failed[hash]++
		n := gs.failed[hash]
		gs.mu.Unlock()
		s.log.Warn("re-reading the API key of work in progress failed", "error", err.Error(), "failures", n)
		if n < rightsReadFailures {
			return
		}
		inferGone = &Error{Code: CodeStoreUnavailable, Message: "the API key cannot be checked: the database is unreachable; retry shortly", RetryAfter: storeRetryAfter, Err: errors.Join(errRightEnded, err)}
		liveGone = inferGone
	} else {
		delete(gs.failed, hash)
		gs.mu.Unlock()
	}
	for _, g := range list {
		e := inferGone
		if g.right == rightLive && e == nil {
			e = liveGone
		}
		if e != nil {
			g.stop(e)
		}
	}
}

// keyRights reads key hash and says why it lost the right to infer
// (inferGone) and, when live, to listen (liveGone); both nil when it keeps
// them. err is a failure to read the store.
func (s *Server) keyRights(hash string, live bool) (inferGone, liveGone *Error, err error) {
	key, err := s.store.GetKey(hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rightEnded(CodeUnauthorized, "the API key no longer exists"), nil, nil
	case err != nil:
		return nil, nil, err
	}
	if e := inferRightGone(key); e != nil {
		return e, nil, nil
	}
	if !live {
		return nil, nil, nil
	}
	if err := s.liveAllowed(key); err != nil {
		ae := toAPIError(err)
		if ae.Code == CodeStoreUnavailable || ae.Code == CodeInternal {
			return nil, nil, err
		}
		return nil, rightEnded(ae.Code, ae.Message), nil
	}
	return nil, nil, nil
}

// inferRightGone says why key may no longer infer, or nil.
func inferRightGone(key store.APIKey) *Error {
	if key.Status != store.StatusActive {
		return rightEnded(CodeUnauthorized, "the API key has been revoked")
	}
	if !slices.Contains(key.Scopes, ScopeInfer) {
		return rightEnded(CodeForbidden, "the API key no longer has the scope \"infer\"")
	}
	return nil
}

func rightEnded(code, msg string) *Error {
	return &Error{Code: code, Message: msg, Err: errRightEnded}
}

// rightEndedCause returns the error that ended ctx's work because its key
// lost its right, or nil when ctx did not end so.
func rightEndedCause(ctx context.Context) *Error {
	var ae *Error
	if cause := context.Cause(ctx); errors.Is(cause, errRightEnded) && errors.As(cause, &ae) {
		return ae
	}
	return nil
}

// liveRight re-reads the session's key at a turn: nil while it may listen,
// else the error, after which the session is ending.
func (s *Server) liveRight(sess *liveSession) error {
	inferGone, liveGone, err := s.keyRights(sess.key.Hash, !sess.oneTurn)
	if err != nil {
		return err
	}
	if e := cmpOr(inferGone, liveGone); e != nil {
		sess.endForRight(e)
		return e
	}
	return nil
}

func cmpOr(a, b *Error) *Error {
	if a != nil {
		return a
	}
	return b
}

// endForRight ends a live session whose key lost its right: its work stops
// and nothing more is sent at once (the context's cause is e), then the
// session closes with the code that says why (CloseRevoked, or
// CloseSwitchedOff, or 1013 when the key could not be read).
func (sess *liveSession) endForRight(e *Error) {
	sess.cancel(e)
	// In the background: the close handshake may wait for the peer.
	go sess.closeForRight()
}

// closeForRight closes the session with the code of its key's end when its
// work was ended so (endForRight); the reader calls it too as it stops, so
// that the code is sent whichever comes first.
func (sess *liveSession) closeForRight() {
	e := rightEndedCause(sess.ctx)
	if e == nil {
		return
	}
	code := CloseSwitchedOff
	switch e.Code {
	case CodeUnauthorized:
		code = CloseRevoked
	case CodeStoreUnavailable:
		code = websocket.StatusTryAgainLater
	}
	sess.end(code, e.Message)
}

// inferRight ties a /v1/infer (or steered, or admin try) request of key
// hash to the key's right: the request's context is replaced by one that
// the key's end cancels. done releases it and returns the error the
// request ends with: the right's end when it ended the work before the
// answer was sent, else err.
func (s *Server) inferRight(c echo.Context, hash string) (done func(err error) error) {
	ctx, cancel := context.WithCancelCause(c.Request().Context())
	c.SetRequest(c.Request().WithContext(ctx))
	release := s.holdRight(hash, rightInfer, func(e *Error) { cancel(e) })
	return func(err error) error {
		release()
		if e := rightEndedCause(ctx); e != nil && !c.Response().Committed {
			err = e
		}
		cancel(nil)
		return err
	}
}
