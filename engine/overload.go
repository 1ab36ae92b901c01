package engine

import (
	"context"
	"sync"
	"time"
)

// Stage is admission control for one step of the pipeline that serves
// requests one at a time (speech-to-text; the language model's batches).
// It refuses at once, with ErrOverloaded, a request that would find more than
// Max requests already in the stage, or whose expected wait (the requests
// ahead of it times the recent service time) is longer than the time left
// before its deadline. A request refused early costs the client a quick 503
// and a retry instead of a 30-second wait that ends in a timeout anyway.
//
// The zero Stage admits everything. A Stage is safe for concurrent use.
type Stage struct {
	// Max is the most requests in the stage, waiting or served; 0 = no bound.
	Max int

	mu       sync.Mutex
	inflight int
	avg      time.Duration // exponentially weighted mean service time
}

// Enter admits the request or returns ErrOverloaded. On admission the caller
// must call the returned done func with the time its own work took (not
// counting its wait), exactly once.
func (s *Stage) Enter(ctx context.Context) (done func(served time.Duration), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Max > 0 && s.inflight >= s.Max {
		return nil, ErrOverloaded
	}
	if dl, ok := ctx.Deadline(); ok && s.avg > 0 && s.inflight > 0 {
		// The requests ahead, then this request's own service.
		expected := time.Duration(s.inflight+1) * s.avg
		if expected > time.Until(dl) {
			return nil, ErrOverloaded
		}
	}
	s.inflight++
	var once sync.Once
	return func(served time.Duration) {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.inflight--
			if served > 0 {
				if s.avg == 0 {
					s.avg = served
				} else {
					s.avg = (4*s.avg + served) / 5
				}
			}
		})
	}, nil
}

// InFlight returns how many requests are in the stage.
func (s *Stage) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight
}

// Avg returns the stage's recent mean service time (0 before the first).
func (s *Stage) Avg() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.avg
}

// Workload bounds how long an admitted request waits for the CPU that both
// engines share. Every admitted request reserves its expected work (the
// stages' recent service times); a request is refused at once, with
// ErrOverloaded, when the work reserved before it is more than MaxWaitRatio
// times its own: its wait would be more than that multiple of its own
// service, so its latency more than 1+MaxWaitRatio times the unloaded one.
// Refused clients retry after Retry-After, which a busy hour turns into
// fast 503s instead of answers that come too late to be said.
//
// The zero Workload (MaxWaitRatio 0) admits everything. It is safe for
// concurrent use.
type Workload struct {
	MaxWaitRatio float64

	mu          sync.Mutex
	outstanding time.Duration
}

// Admit reserves own, the request's expected work, or refuses the request.
// The returned release gives back part of the reservation as stages finish;
// it may be called several times and gives back at most own in all.
func (w *Workload) Admit(own time.Duration) (release func(time.Duration), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.MaxWaitRatio > 0 && own > 0 && w.outstanding > time.Duration(w.MaxWaitRatio*float64(own)) {
		return nil, ErrOverloaded
	}
	w.outstanding += own
	left := own
	return func(d time.Duration) {
		w.mu.Lock()
		defer w.mu.Unlock()
		d = min(d, left)
		left -= d
		w.outstanding -= d
	}, nil
}

// Outstanding returns the work reserved by admitted requests.
func (w *Workload) Outstanding() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outstanding
}

// Slots bounds how many requests do one step at once; the others wait for a
// slot until their context ends. Max 0 (the zero value) admits everyone. A
// Slots is safe for concurrent use and must not be copied after first use.
type Slots struct {
	Max int

	once sync.Once
	ch   chan struct{}
}

// Acquire waits for a slot. On success the caller must call release exactly
// once; when ctx ends first it returns a KindCanceled error.
func (s *Slots) Acquire(ctx context.Context) (release func(), err error) {
	if s.Max <= 0 {
		return func() {}, nil
	}
	s.once.Do(func() { s.ch = make(chan struct{}, s.Max) })
	select {
	case s.ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-s.ch }) }, nil
	case <-ctx.Done():
		return nil, &Error{Kind: KindCanceled, Message: "the request was canceled or timed out", Err: ctx.Err()}
	}
}
