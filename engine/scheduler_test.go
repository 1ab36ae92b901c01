package engine

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestSchedulerGrantsWithinTheBudget(t *testing.T) {
	c := NewCores(4)
	ctx := context.Background()
	if n, _ := c.Acquire(ctx, 1, 3); n != 3 {
		t.Fatalf("first grant %d, want 3", n)
	}
	if n, _ := c.Acquire(ctx, 1, 3); n != 1 {
		t.Fatalf("second grant %d, want the 1 left", n)
	}
	wantFree(t, c, 0)
	// A waiter needing 3 is first in line: a later one needing 1 waits
	// behind it even when 1 core is free.
	big := enqueue(t, c, PriorityCommitted, 3, 3)
	small := enqueue(t, c, PriorityCommitted, 1, 4)
	c.Release(1) // the 1 taken second
	select {
	case <-small:
		t.Fatal("a later waiter overtook the first one")
	default:
	}
	c.Release(3)
	wantCores(t, "the first waiter", <-big, 3)
	wantCores(t, "the second waiter", <-small, 1)
	c.Release(3)
	c.Release(1)
	wantFree(t, c, 4)
}

func TestSchedulerCancelledWaiterTakesNothing(t *testing.T) {
	c := NewCores(2)
	n, _ := c.Acquire(context.Background(), 2, 2)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Acquire(ctx, 2, 2); errc <- err }()
	waitFor(t, func() bool { return c.waiting() == 1 })
	// A waiter behind the cancelled one is served when it leaves.
	got := enqueue(t, c, PriorityCommitted, 1, 1)
	c.Release(1)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled waiter: %v", err)
	}
	wantCores(t, "the waiter behind", <-got, 1)
	c.Release(n - 1)
	c.Release(1)
	wantFree(t, c, 2)
	var none *Scheduler
	if n, err := none.Acquire(context.Background(), 1, 3); n != 3 || err != nil {
		t.Fatalf("nil budget granted %d, %v", n, err)
	}
}

// waiting counts the committed work waiting for cores.
func (s *Scheduler) waiting() int { return s.waitingAt(PriorityCommitted) }

// waitingAt counts the waiters of priority p.
func (s *Scheduler) waitingAt(p Priority) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters[p])
}

// waitFor polls cond until it holds (other goroutines must reach a state).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTranscriptTokenCap(t *testing.T) {
	for _, tc := range []struct {
		speech time.Duration
		cap    int
	}{
		{0, 0}, {time.Second, 44}, {5 * time.Second, 92}, {30 * time.Second, 392}, {31 * time.Second, 32*2 + 372},
	} {
		if got := TranscriptTokenCap(tc.speech); got != tc.cap {
			t.Errorf("TranscriptTokenCap(%v) = %d, want %d", tc.speech, got, tc.cap)
		}
	}
	if got := TranscriptReserve(5 * time.Second); got != 2*92+16 {
		t.Errorf("TranscriptReserve(5s) = %d", got)
	}
}

// TestSchedulerIdleWorkComesLast: work ahead queued before committed work
// is served after it, with what is left.
func TestSchedulerIdleWorkComesLast(t *testing.T) {
	c := NewCores(2)
	ctx := context.Background()
	held, _ := c.Acquire(ctx, 2, 2)
	idle := enqueue(t, c, PriorityAhead, 1, 2)
	busy := enqueue(t, c, PriorityCommitted, 1, 1)
	c.Release(held)
	// The later Acquire is served first; the idle work gets what is left.
	wantCores(t, "the Acquire", <-busy, 1)
	wantCores(t, "the ahead work", <-idle, 1)
	c.Release(2)
}

// TestSchedulerLends: a transcription grows into cores that are free while
// nobody waits, gives back all but its own as soon as anybody waits (committed
// or ahead work), and never goes below its own.
func TestSchedulerLends(t *testing.T) {
	c := NewCores(3)
	ctx := context.Background()
	base, _ := c.Acquire(ctx, 1, 1)
	held := c.Lend(base, base, 3)
	if held != 3 || c.Free() != 0 {
		t.Fatalf("grew to %d (free %d), want all 3", held, c.Free())
	}
	// Somebody waits: back to its own 1, and the waiter is served.
	got := make(chan int, 1)
	go func() { n, _ := c.AcquireAt(ctx, PriorityAhead, 1, 2); got <- n }()
	waitFor(t, func() bool { return c.Contended() })
	if held = c.Lend(base, held, 3); held != 1 {
		t.Fatalf("held %d with a waiter, want 1", held)
	}
	wantCores(t, "the waiter", <-got, 2)
	// Nothing free: it keeps its own.
	if held = c.Lend(base, held, 3); held != 1 {
		t.Fatalf("held %d with nothing free, want 1", held)
	}
	c.Release(2)
	// Asked for fewer than it holds (the encoder is done): gives back.
	if held = c.Lend(base, held, 3); held != 3 {
		t.Fatalf("held %d", held)
	}
	if held = c.Lend(base, held, 1); held != 1 || c.Free() != 2 {
		t.Fatalf("held %d, free %d after giving back; want 1 and 2", held, c.Free())
	}
	c.Release(held)
	wantFree(t, c, 3)
}

// TestSchedulerServesByPriority: with every core held, waiters of all four
// priorities queue; released cores go to voice detection first, then
// committed work in arrival order, then work ahead, then speculative work,
// whatever order they came in.
func TestSchedulerServesByPriority(t *testing.T) {
	s := NewCores(1)
	ctx := context.Background()
	held, _ := s.Acquire(ctx, 1, 1)
	order := make(chan string, 5)
	queue := func(name string, p Priority) {
		before := s.waitingAt(p)
		go func() {
			n, err := s.AcquireAt(ctx, p, 1, 1)
			if err != nil {
				t.Error(err)
				return
			}
			order <- name
			s.Release(n)
		}()
		waitFor(t, func() bool { return s.waitingAt(p) == before+1 })
	}
	queue("speculative", PrioritySpeculative)
	queue("ahead", PriorityAhead)
	queue("committed 1", PriorityCommitted)
	queue("voice", PriorityVoice)
	queue("committed 2", PriorityCommitted)
	s.Release(held)
	var got []string
	for range 5 {
		got = append(got, <-order)
	}
	want := []string{"voice", "committed 1", "committed 2", "ahead", "speculative"}
	if !slices.Equal(got, want) {
		t.Errorf("served %v, want %v", got, want)
	}
	wantFree(t, s, 1)
}

// TestSchedulerLowerPriorityWaitsForFreeCore: a free core does not go to
// work of a lower priority (ahead or speculative) while committed work
// waits for more cores than are free.
func TestSchedulerLowerPriorityWaitsForFreeCore(t *testing.T) {
	for _, p := range []Priority{PriorityAhead, PrioritySpeculative} {
		s := NewCores(2)
		ctx := context.Background()
		one, _ := s.Acquire(ctx, 1, 1)
		both := enqueue(t, s, PriorityCommitted, 2, 2)
		lower := enqueue(t, s, p, 1, 1)
		if n := s.TryAcquire(1); n != 0 {
			t.Errorf("TryAcquire took %d while committed work waits", n)
		}
		select {
		case <-lower:
			t.Fatalf("%v work took the core committed work waits for", p)
		default:
		}
		s.Release(one)
		s.Release(<-both)
		wantCores(t, "the lower priority work", <-lower, 1)
		s.Release(1)
		wantFree(t, s, 2)
	}
}

// TestSchedulerSpeculativeYields: speculative work keeps its cores at a
// yield point while nobody waits, gives them all back when work of a higher
// priority waits, and continues once that work is done; committed work
// never yields to anyone.
func TestSchedulerSpeculativeYields(t *testing.T) {
	s := NewCores(2)
	ctx := context.Background()
	held, _ := s.AcquireAt(ctx, PrioritySpeculative, 1, 2)
	if held != 2 {
		t.Fatalf("speculative work got %d cores of 2 free", held)
	}
	if n, err := s.Yield(ctx, PrioritySpeculative, held); n != 2 || err != nil {
		t.Fatalf("yield with nobody waiting: %d, %v; want 2 kept", n, err)
	}
	// Another speculative waiter is not of a higher priority.
	other := enqueue(t, s, PrioritySpeculative, 1, 1)
	if n, _ := s.Yield(ctx, PrioritySpeculative, held); n != 2 {
		t.Fatalf("yielded to work of its own priority (holds %d)", n)
	}
	// Committed work arrives: the next yield point gives it the cores.
	committed := enqueue(t, s, PriorityCommitted, 2, 2)
	yielded := make(chan int, 1)
	go func() { n, _ := s.Yield(ctx, PrioritySpeculative, held); yielded <- n }()
	c := <-committed
	if c != 2 {
		t.Fatalf("committed work got %d, want both cores", c)
	}
	select {
	case n := <-yielded:
		t.Fatalf("the yielding work came back with %d cores while committed work holds both", n)
	default:
	}
	// The committed work's own yield points keep its cores.
	if n, _ := s.Yield(ctx, PriorityCommitted, c); n != c {
		t.Fatalf("committed work yielded (holds %d)", n)
	}
	s.Release(c)
	// The speculative waiter queued first is served first, then the
	// yielded work with what is left.
	wantCores(t, "the earlier speculative waiter", <-other, 1)
	wantCores(t, "the yielded work", <-yielded, 1)
	s.Release(2)
	wantFree(t, s, 2)
	// A yield point whose context ends while it waits holds nothing.
	held, _ = s.AcquireAt(ctx, PrioritySpeculative, 2, 2)
	go func() { n, _ := s.Acquire(ctx, 2, 2); committed <- n }()
	waitFor(t, func() bool { return s.waiting() == 1 })
	yctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { n, err := s.Yield(yctx, PrioritySpeculative, held); yielded <- n; errc <- err }()
	c = <-committed
	waitFor(t, func() bool { return s.waitingAt(PrioritySpeculative) == 1 })
	cancel()
	if n, err := <-yielded, <-errc; n != 0 || err != context.Canceled {
		t.Fatalf("cancelled yield: %d, %v", n, err)
	}
	s.Release(c)
	wantFree(t, s, 2)
}

// TestSchedulerLendsOnlyAlone: a transcription borrows free cores only
// while it is the only request in the stages, gives them back when another
// request enters a stage, and does not give them up to speculative work.
func TestSchedulerLendsOnlyAlone(t *testing.T) {
	s := NewScheduler(SchedulerConfig{Cores: 2, STTThreads: 1})
	ctx := context.Background()
	sttDone, _ := s.STT.Enter(ctx)
	threads, grow, end, err := s.BeginTranscription(ctx)
	if err != nil || threads != 1 {
		t.Fatalf("began on %d threads (%v), want STTThreads 1", threads, err)
	}
	if n := grow(2); n != 2 {
		t.Fatalf("alone it grew to %d, want 2", n)
	}
	// Speculative work waiting does not take the lent core.
	spec := enqueue(t, s, PrioritySpeculative, 1, 1)
	if n := grow(2); n != 2 {
		t.Fatalf("gave back a lent core for speculative work (holds %d)", n)
	}
	// Another request in the language-model stage: back to its own core,
	// which the speculative waiter then gets.
	llmDone, _ := s.LLM.Enter(ctx)
	if n := grow(2); n != 1 {
		t.Fatalf("with another request in the stages it holds %d, want 1", n)
	}
	wantCores(t, "the speculative waiter", <-spec, 1)
	s.Release(1)
	llmDone(0)
	// A second transcription waits for the first's turn.
	second := make(chan int, 1)
	go func() {
		n, _, end2, err := s.BeginTranscription(ctx)
		if err == nil {
			end2()
		}
		second <- n
	}()
	select {
	case <-second:
		t.Fatal("a second transcription began while the first ran")
	case <-time.After(20 * time.Millisecond):
	}
	end()
	sttDone(0)
	wantCores(t, "the second transcription", <-second, 1)
	wantFree(t, s, 2)
}

// TestSchedulerDecodeLimit: at most MaxDecodes recordings are decoded at
// once, each on one core.
func TestSchedulerDecodeLimit(t *testing.T) {
	s := NewScheduler(SchedulerConfig{Cores: 2, MaxDecodes: 1})
	ctx := context.Background()
	end, err := s.BeginDecode(ctx)
	if err != nil || s.Free() != 1 {
		t.Fatalf("first decode: %v, free %d", err, s.Free())
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.BeginDecode(tctx); KindOf(err) != KindCanceled {
		t.Fatalf("second decode at once: %v, want it to wait until its deadline", err)
	}
	end()
	wantFree(t, s, 2)
}

// enqueue starts AcquireAt(p, lo, hi) in the background, waits until it
// has joined the waiters of priority p, and returns the channel the cores it
// gets arrive on.
func enqueue(t *testing.T, s *Scheduler, p Priority, lo, hi int) chan int {
	t.Helper()
	before := s.waitingAt(p)
	got := make(chan int, 1)
	go func() { n, _ := s.AcquireAt(context.Background(), p, lo, hi); got <- n }()
	waitFor(t, func() bool { return s.waitingAt(p) == before+1 })
	return got
}

// wantCores fails t unless who got n cores.
func wantCores(t *testing.T, who string, got, n int) {
	t.Helper()
	if got != n {
		t.Fatalf("%s got %d cores, want %d", who, got, n)
	}
}

// wantFree fails t unless s has n cores free.
func wantFree(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	if got := s.Free(); got != n {
		t.Fatalf("free %d, want %d", got, n)
	}
}

// TestSpeculativeTranscriptionGivesWay: a speculative transcription takes
// the transcription's turn and cores at the lowest priority; between the
// encoder's steps it gives its cores to committed work that waits, and a
// committed transcription that comes cancels it and gets the turn.
func TestSpeculativeTranscriptionGivesWay(t *testing.T) {
	s := NewScheduler(SchedulerConfig{Cores: 2})
	ctx := context.Background()
	canceled := make(chan struct{})
	var once bool
	threads, grow, end, err := s.BeginSpeculativeTranscription(ctx, func() {
		if !once {
			once = true
			close(canceled)
		}
	})
	if err != nil || threads != 2 || s.Free() != 0 {
		t.Fatalf("threads %d, err %v, free %d", threads, err, s.Free())
	}
	// Nobody waits: the step keeps its cores.
	if n := grow(2); n != 2 || s.Free() != 0 {
		t.Fatalf("grow %d, free %d with nobody waiting", n, s.Free())
	}
	// Committed work comes to wait: it cancels the speculative pass, and
	// the pass's next step gives it the cores.
	got := make(chan int)
	go func() {
		n, _ := s.Acquire(ctx, 1, 1)
		got <- n
	}()
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("waiting committed work did not cancel the speculative pass")
	}
	stepped := make(chan int)
	go func() { stepped <- grow(2) }()
	if n := <-got; n != 1 {
		t.Fatalf("committed work got %d cores", n)
	}
	s.Release(1)
	if n := <-stepped; n != 2 {
		t.Fatalf("the step after yielding runs %d threads", n)
	}
	// A committed transcription waits for the turn until end.
	began := make(chan struct{})
	go func() {
		_, _, end2, err := s.BeginTranscription(ctx)
		if err == nil {
			end2()
		}
		close(began)
	}()
	select {
	case <-began:
		t.Fatal("a committed transcription ran beside the speculative one")
	case <-time.After(50 * time.Millisecond):
	}
	end()
	select {
	case <-began:
	case <-time.After(5 * time.Second):
		t.Fatal("the committed transcription never got the turn")
	}
	if s.Free() != 2 {
		t.Fatalf("free %d at the end", s.Free())
	}
}

// TestSpeculativePromptWorkKeepsItsPass: the prompt work a speculative
// pass queues (marked WithPriority(PrioritySpeculative)) waits behind the
// pass's own transcription without canceling it (at PriorityAhead it would:
// every speculative pass with its prompt to evaluate canceled itself), and
// a committed language-model request stops the pass (StopSpeculative).
func TestSpeculativePromptWorkKeepsItsPass(t *testing.T) {
	s := NewScheduler(SchedulerConfig{Cores: 2})
	ctx := context.Background()
	var canceled atomic.Int32
	_, _, end, err := s.BeginSpeculativeTranscription(ctx, func() { canceled.Add(1) })
	if err != nil || s.Free() != 0 {
		t.Fatalf("err %v, free %d", err, s.Free())
	}
	wctx, stop := context.WithCancel(WithPriority(ctx, PrioritySpeculative))
	waited := make(chan error)
	go func() {
		n, err := s.AcquireAt(wctx, PriorityOf(wctx, PriorityAhead), 1, 2)
		if err == nil {
			s.Release(n)
		}
		waited <- err
	}()
	for s.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if n := canceled.Load(); n != 0 {
		t.Fatalf("the pass's own prompt work canceled it %d times", n)
	}
	if p := PriorityOf(ctx, PriorityAhead); p != PriorityAhead {
		t.Fatalf("PriorityOf an unmarked context: %v", p)
	}
	s.StopSpeculative()
	if n := canceled.Load(); n != 1 {
		t.Fatalf("StopSpeculative canceled the pass %d times, want 1", n)
	}
	stop()
	if err := <-waited; err == nil {
		t.Fatal("the prompt work got cores the pass still held")
	}
	end()
	s.StopSpeculative() // no pass: nothing to stop
	if n := canceled.Load(); n != 1 || s.Free() != 2 {
		t.Fatalf("canceled %d, free %d at the end", n, s.Free())
	}
}
