package slot

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// model is a loaded model as the slot sees it: a name, and whether Close
// was called (a second Close is a test failure: a model is freed once).
type model struct {
	name   string
	closed atomic.Int32
}

func (m *model) Close() error {
	m.closed.Add(1)
	return nil
}

func (m *model) isClosed() bool { return m.closed.Load() > 0 }

func opener(m *model) func() (*model, error) {
	return func() (*model, error) { return m, nil }
}

func failing(err error) func() (*model, error) {
	return func() (*model, error) { return nil, err }
}

// mustAcquire acquires the slot's model and checks it is want.
func mustAcquire(t *testing.T, s *Slot[*model], want *model) func() {
	t.Helper()
	m, release, err := s.Acquire()
	if err != nil {
		t.Fatalf("Acquire: %v, want %s", err, want.name)
	}
	if m != want {
		t.Fatalf("Acquire = %s, want %s", m.name, want.name)
	}
	if m.isClosed() {
		t.Fatalf("Acquire returned %s, which is closed", m.name)
	}
	return release
}

// acquireUntil acquires and releases the slot's model until done says
// what Acquire returned is what the test waits for (a switch in another
// goroutine gets there), and returns that error.
func acquireUntil(s *Slot[*model], done func(m *model, err error) bool) error {
	for {
		m, rel, err := s.Acquire()
		if err == nil {
			rel()
		}
		if done(m, err) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

func checkClosed(t *testing.T, m *model, want int32) {
	t.Helper()
	if got := m.closed.Load(); got != want {
		t.Fatalf("%s closed %d times, want %d", m.name, got, want)
	}
}

func TestEmptySlot(t *testing.T) {
	var s Slot[*model]
	if _, _, err := s.Acquire(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Acquire of an empty slot: %v, want ErrEmpty", err)
	}
	if s.Peek(func(*model) { t.Fatal("Peek called f on an empty slot") }) {
		t.Fatal("Peek of an empty slot reported a model")
	}
	if _, ok := s.Swapping(); ok {
		t.Fatal("an empty slot reports a swap")
	}
	a := &model{name: "a"}
	if !s.Put(a) {
		t.Fatal("Put into an empty slot refused")
	}
	if b := (&model{name: "b"}); s.Put(b) {
		t.Fatal("Put into a full slot accepted")
	}
	mustAcquire(t, &s, a)()
}

// TestBesideDrainsTheOldModel: requests running on the old model finish
// there, new ones take the new model at once, and the old one is closed
// only after the last release; Beside returns after that.
func TestBesideDrainsTheOldModel(t *testing.T) {
	var s Slot[*model]
	a, b := &model{name: "a"}, &model{name: "b"}
	s.Put(a)
	relA := mustAcquire(t, &s, a)

	done := make(chan error)
	go func() { done <- s.Beside(opener(b)) }()
	// Wait until b is current, while a is still held.
	if err := acquireUntil(&s, func(m *model, err error) bool { return err != nil || m == b }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Beside returned (%v) while the old model was in use", err)
	default:
	}
	checkClosed(t, a, 0)
	relA()
	relA() // a second release does not count twice
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkClosed(t, a, 1)
	checkClosed(t, b, 0)
	mustAcquire(t, &s, b)()
}

// TestBesideFailureKeepsTheOldModel: a new model that fails to load leaves
// the old one serving, untouched.
func TestBesideFailureKeepsTheOldModel(t *testing.T) {
	var s Slot[*model]
	a := &model{name: "a"}
	s.Put(a)
	boom := errors.New("bad magic")
	err := s.Beside(failing(boom))
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, boom) || se.Old != nil {
		t.Fatalf("Beside: %#v, want *Error{New: boom}", err)
	}
	checkClosed(t, a, 0)
	mustAcquire(t, &s, a)()
}

// TestSwapFreesFirst: from the start of a swap, requests get
// *SwappingError with the expected end; the old model is closed, after its
// requests, before the new one opens.
func TestSwapFreesFirst(t *testing.T) {
	var s Slot[*model]
	a, b := &model{name: "a"}, &model{name: "b"}
	s.Put(a)
	relA := mustAcquire(t, &s, a)

	opened := make(chan struct{})
	proceed := make(chan struct{})
	start := time.Now()
	done := make(chan error)
	go func() {
		done <- s.Swap(time.Minute, func() (*model, error) {
			if !a.isClosed() {
				t.Error("the new model opened before the old one was closed")
			}
			close(opened)
			<-proceed
			return b, nil
		}, opener(a))
	}()
	// The swap has emptied the slot: requests are told to come back.
	var sw *SwappingError
	if err := acquireUntil(&s, func(_ *model, err error) bool { return err != nil }); !errors.As(err, &sw) {
		t.Fatalf("Acquire during the swap: %v, want *SwappingError", err)
	}
	if sw.Until.Before(start.Add(time.Minute)) || sw.Until.After(time.Now().Add(time.Minute)) {
		t.Fatalf("SwappingError.Until = %v, want about %v", sw.Until, start.Add(time.Minute))
	}
	if until, ok := s.Swapping(); !ok || !until.Equal(sw.Until) {
		t.Fatalf("Swapping() = %v %v, want %v true", until, ok, sw.Until)
	}
	select {
	case <-opened:
		t.Fatal("the new model opened while the old one was in use")
	case <-time.After(20 * time.Millisecond):
	}
	checkClosed(t, a, 0)
	relA()
	<-opened
	close(proceed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkClosed(t, a, 1)
	if _, ok := s.Swapping(); ok {
		t.Fatal("the slot still reports a swap after it ended")
	}
	mustAcquire(t, &s, b)()
}

// TestSwapFailureReloadsTheOldModel: the new model fails to load; the old
// one is loaded again and serves.
func TestSwapFailureReloadsTheOldModel(t *testing.T) {
	var s Slot[*model]
	a, a2 := &model{name: "a"}, &model{name: "a again"}
	s.Put(a)
	boom := errors.New("out of memory")
	err := s.Swap(time.Second, failing(boom), opener(a2))
	var se *Error
	if !errors.As(err, &se) || se.New != boom || se.Old != nil {
		t.Fatalf("Swap: %#v, want *Error{New: boom}", err)
	}
	if err.Error() != "out of memory" {
		t.Fatalf("Swap error text %q", err.Error())
	}
	checkClosed(t, a, 1)
	if _, ok := s.Swapping(); ok {
		t.Fatal("the slot still reports a swap")
	}
	mustAcquire(t, &s, a2)()
}

// TestSwapFailureLeavesTheEngineDown: neither the new model nor the old
// one loads; the slot is empty and says so (ErrEmpty, no swap), and the
// error carries both causes.
func TestSwapFailureLeavesTheEngineDown(t *testing.T) {
	var s Slot[*model]
	a := &model{name: "a"}
	s.Put(a)
	boom, gone := errors.New("out of memory"), errors.New("old file removed")
	err := s.Swap(time.Second, failing(boom), failing(gone))
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, boom) || !errors.Is(err, gone) {
		t.Fatalf("Swap: %#v, want *Error{New: boom, Old: gone}", err)
	}
	if want := "out of memory; reloading the old model: old file removed"; err.Error() != want {
		t.Fatalf("Swap error text %q, want %q", err.Error(), want)
	}
	if _, _, err := s.Acquire(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Acquire after both failed: %v, want ErrEmpty", err)
	}
	// Without a reopen the outcome is the same.
	if err := s.Swap(time.Second, failing(boom), nil); !errors.Is(err, boom) {
		t.Fatalf("Swap without reopen: %v", err)
	}
	// A later swap (or a Beside) brings the engine back.
	b := &model{name: "b"}
	if err := s.Swap(time.Second, opener(b), nil); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, &s, b)()
}

// TestClose waits for the requests and frees the model once; later swaps
// fail and free what they load.
func TestClose(t *testing.T) {
	var s Slot[*model]
	a := &model{name: "a"}
	s.Put(a)
	rel := mustAcquire(t, &s, a)
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case <-done:
		t.Fatal("Close returned while the model was in use")
	case <-time.After(20 * time.Millisecond):
	}
	rel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkClosed(t, a, 1)
	if _, _, err := s.Acquire(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	b := &model{name: "b"}
	if err := s.Beside(opener(b)); err == nil {
		t.Fatal("Beside after Close succeeded")
	}
	checkClosed(t, b, 1)
	if s.Put(&model{name: "c"}) {
		t.Fatal("Put after Close accepted")
	}
	if err := s.Swap(0, opener(&model{name: "d"}), nil); err == nil {
		t.Fatal("Swap after Close succeeded")
	}
}

// TestNoModelUsedAfterClose: requests acquiring and releasing without a
// pause while swaps of both kinds replace the model never hold a closed
// one, and every model but the last is closed exactly once (run with
// -race).
func TestNoModelUsedAfterClose(t *testing.T) {
	var s Slot[*model]
	first := &model{name: "0"}
	s.Put(first)
	all := []*model{first}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var used atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, rel, err := s.Acquire()
				if err != nil {
					continue // swapping
				}
				if m.isClosed() {
					t.Errorf("acquired %s after it was closed", m.name)
				}
				used.Add(1)
				time.Sleep(10 * time.Microsecond)
				if m.isClosed() {
					t.Errorf("%s closed while in use", m.name)
				}
				rel()
			}
		}()
	}
	for i := 1; i <= 40; i++ {
		// Let some requests run on the model before replacing it.
		for n := used.Load(); used.Load() < n+4; {
			time.Sleep(50 * time.Microsecond)
		}
		m := &model{name: string(rune('0' + i))}
		all = append(all, m)
		var err error
		if i%2 == 0 {
			err = s.Beside(opener(m))
		} else {
			err = s.Swap(time.Millisecond, opener(m), nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if used.Load() == 0 {
		t.Fatal("no request ran")
	}
	for _, m := range all[:len(all)-1] {
		checkClosed(t, m, 1)
	}
	checkClosed(t, all[len(all)-1], 0)
}
