package engine

import (
	"context"
	"sync"
	"time"
)

// Priority orders the work that waits for cores. A waiter is served only
// when no waiter of a higher priority (a lower value) is left, and waiters
// of one priority are served in arrival order.
type Priority int

// Priorities, highest first.
const (
	// PriorityVoice is voice detection on live audio: cheap, and it decides
	// when a turn ends.
	PriorityVoice Priority = iota
	// PriorityCommitted is the work of a request somebody waits for:
	// decoding its recording, transcribing it, evaluating its prompt and
	// sampling its candidates.
	PriorityCommitted
	// PriorityAhead is prompt work done ahead for a committed turn (the
	// prompt evaluated while its recording is transcribed): it takes only
	// cores that no committed work waits for.
	PriorityAhead
	// PrioritySpeculative is work for a turn that may never be asked for
	// (a transcript of audio still being listened to). It gives its cores
	// back at its next yield point (Yield: one encoder layer or one prompt
	// chunk) when work of any higher priority waits.
	PrioritySpeculative
	nPriorities
)

// String returns the priority's name.
func (p Priority) String() string {
	switch p {
	case PriorityVoice:
		return "voice"
	case PriorityCommitted:
		return "committed"
	case PriorityAhead:
		return "ahead"
	case PrioritySpeculative:
		return "speculative"
	}
	return "unknown"
}

// SchedulerConfig sizes a Scheduler. Zero values mean no bound.
type SchedulerConfig struct {
	// Cores is the CPU budget both engines share; 0: no budget (Acquire
	// grants the most asked for at once).
	Cores int
	// STTThreads is the cores a transcription starts on; 0: the whole
	// budget.
	STTThreads int
	// STTQueue and LLMQueue are the most requests in the speech-to-text and
	// language-model stages, waiting or served (Stage.Max).
	STTQueue, LLMQueue int
	// MaxWaitRatio bounds the work admitted ahead of a request as a
	// multiple of its own (Workload.MaxWaitRatio).
	MaxWaitRatio float64
	// MaxDecodes bounds the recordings decoded at once (Slots.Max).
	MaxDecodes int
}

// Scheduler decides when the pipeline's work runs on the box's cores. It
// holds, in one place:
//
//   - the queues: admission into the speech-to-text and language-model
//     stages (STT, LLM), refused at once with ErrOverloaded when too many
//     requests are in a stage or the expected wait outlasts the deadline,
//     and the Workload bound on the work admitted ahead of a request;
//   - the decode limit: at most MaxDecodes recordings decoded at once
//     (BeginDecode), each on one core;
//   - the CPU budget: the engines' thread pools spin while they wait for
//     each other's threads, so a thread that loses its core stalls its
//     whole pool (20-200x slower on two cores). Every stage that runs
//     threads takes that many cores first (Acquire) and gives them back
//     (Release), so the busy threads never exceed the budget;
//   - the order of service: voice detection on live audio first, then
//     committed work in arrival order, then prompt work ahead for committed
//     turns, then speculative work (see Priority). A waiter that needs many
//     cores is not overtaken by later waiters of its priority that need
//     fewer. A request's language-model job keeps the cores it was granted
//     from its first decode to its last (so the oldest request finishes
//     first), growing into cores nobody waits for (TryAcquire);
//   - the rule for lending cores to a transcription (Lend): one
//     transcription at a time (BeginTranscription) starts on STTThreads
//     cores and borrows the others between the encoder's steps only while
//     it is the only request in the stages and nobody waits for cores
//     ahead of speculative work; it gives back all it borrowed as soon as
//     somebody does;
//   - the yield point of speculative work (Yield).
//
// The nil *Scheduler has no budget and no queues: Acquire grants the most
// asked for at once and nothing waits. A Scheduler is safe for concurrent
// use; make it with NewScheduler.
type Scheduler struct {
	// STT and LLM admit requests into the two serial stages.
	STT, LLM Stage
	// Work admits a request only when the work admitted before it is not
	// expected to keep it waiting too long.
	Work Workload

	sttThreads int
	decodes    Slots
	sttTurn    chan struct{} // the one transcription that holds cores

	mu      sync.Mutex
	total   int // 0: no budget
	free    int
	waiters [nPriorities][]*coreWaiter
	// specCancel stops the speculative transcription that holds the
	// transcription's turn, if any (BeginSpeculativeTranscription).
	specCancel func()
	// specWork stops the other speculative work running or queued (a live
	// turn's replies generated ahead, BeginSpeculative), by its key.
	specWork map[*struct{}]func()
}

type coreWaiter struct {
	lo, hi  int
	granted chan int
}

// NewScheduler returns a scheduler sized by cfg.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	s := &Scheduler{
		STT:        Stage{Max: cfg.STTQueue},
		LLM:        Stage{Max: cfg.LLMQueue},
		Work:       Workload{MaxWaitRatio: cfg.MaxWaitRatio},
		sttThreads: cfg.STTThreads,
		decodes:    Slots{Max: cfg.MaxDecodes},
		sttTurn:    make(chan struct{}, 1),
	}
	if cfg.Cores > 0 {
		s.total, s.free = cfg.Cores, cfg.Cores
	}
	return s
}

// NewCores returns a scheduler with a budget of n cores (at least 1) and no
// other bounds.
func NewCores(n int) *Scheduler { return NewScheduler(SchedulerConfig{Cores: max(n, 1)}) }

// Total returns the size of the budget; 0 when there is none.
func (s *Scheduler) Total() int {
	if s == nil {
		return 0
	}
	return s.total
}

// Acquire takes cores for committed work: AcquireAt with PriorityCommitted.
func (s *Scheduler) Acquire(ctx context.Context, lo, hi int) (int, error) {
	return s.AcquireAt(ctx, PriorityCommitted, lo, hi)
}

// AcquireAt waits until no waiter of priority p or higher is ahead of it
// and at least lo cores are free, then takes as many as are free, up to hi,
// and returns how many it took. lo and hi are clamped to 1..the budget. A
// caller that gets n cores must run at most n busy threads and call
// Release(n) when they have stopped. When ctx ends first, AcquireAt returns
// ctx's error and takes nothing.
func (s *Scheduler) AcquireAt(ctx context.Context, p Priority, lo, hi int) (int, error) {
	hi = max(hi, 1)
	lo = min(max(lo, 1), hi)
	if s == nil || s.total == 0 {
		return hi, nil
	}
	hi = min(hi, s.total)
	lo = min(lo, hi)
	s.mu.Lock()
	if !s.waitingUpToLocked(p) && s.free >= lo {
		n := s.take(hi)
		s.mu.Unlock()
		return n, nil
	}
	w := &coreWaiter{lo: lo, hi: hi, granted: make(chan int, 1)}
	s.waiters[p] = append(s.waiters[p], w)
	var stop []func()
	if p == PriorityCommitted || p == PriorityAhead {
		// Real work waits: speculative work gives way.
		stop = s.specStopsLocked()
	}
	s.mu.Unlock()
	for _, f := range stop {
		f()
	}
	select {
	case n := <-w.granted:
		return n, nil
	case <-ctx.Done():
		s.mu.Lock()
		q := s.waiters[p]
		for i, x := range q {
			if x == w {
				s.waiters[p] = append(q[:i:i], q[i+1:]...)
				break
			}
		}
		// The waiters behind it may be served now.
		s.grant()
		s.mu.Unlock()
		// A grant may have raced the cancellation: give it back.
		select {
		case n := <-w.granted:
			s.Release(n)
		default:
		}
		return 0, ctx.Err()
	}
}

// TryAcquire takes up to max free cores for committed work without
// waiting, and only when no voice or committed work waits; it returns how
// many it took (maybe 0). The caller gives them back with Release.
func (s *Scheduler) TryAcquire(max int) int {
	if s == nil || s.total == 0 || max < 1 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waitingUpToLocked(PriorityCommitted) {
		return 0
	}
	return s.take(max)
}

// Release gives back n cores taken with Acquire, AcquireAt or TryAcquire.
func (s *Scheduler) Release(n int) {
	if s == nil || s.total == 0 || n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = min(s.free+n, s.total)
	s.grant()
}

// Yield is the yield point of work of priority p that holds held cores,
// called between its steps (an encoder layer, a prompt chunk): when work of
// a higher priority waits for cores, it gives all of them back and waits, at
// p, for between 1 and held cores again; otherwise it keeps them. It
// returns the cores held now (0 with ctx's error when ctx ended while it
// waited; nothing is held then).
func (s *Scheduler) Yield(ctx context.Context, p Priority, held int) (int, error) {
	if s == nil || s.total == 0 || p == 0 {
		return held, nil
	}
	s.mu.Lock()
	yield := s.waitingUpToLocked(p - 1)
	s.mu.Unlock()
	if !yield {
		return held, nil
	}
	s.Release(held)
	return s.AcquireAt(ctx, p, 1, held)
}

// Contended reports whether anybody waits for cores, at any priority.
func (s *Scheduler) Contended() bool {
	return s.Waiting() > 0
}

// Waiting returns how many callers wait for cores, at any priority.
func (s *Scheduler) Waiting() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.waiters {
		n += len(q)
	}
	return n
}

// Free returns how many cores nobody holds.
func (s *Scheduler) Free() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}

// waitingUpToLocked reports whether anybody of priority p or higher waits;
// s.mu is held.
func (s *Scheduler) waitingUpToLocked(p Priority) bool {
	for q := PriorityVoice; q <= p && q < nPriorities; q++ {
		if len(s.waiters[q]) > 0 {
			return true
		}
	}
	return false
}

// grant serves the waiters, highest priority first and each priority in
// arrival order, while the head of the line finds enough cores free; s.mu
// is held.
func (s *Scheduler) grant() {
	for p := range s.waiters {
		for len(s.waiters[p]) > 0 {
			w := s.waiters[p][0]
			if s.free < w.lo {
				return
			}
			s.waiters[p] = s.waiters[p][1:]
			w.granted <- s.take(w.hi)
		}
	}
}

// take removes up to max free cores; s.mu is held.
func (s *Scheduler) take(max int) int {
	n := min(s.free, max)
	s.free -= n
	return n
}

// BeginDecode waits for one of the MaxDecodes slots of decoding a
// recording (decoding is the step whose memory grows with the upload) and
// for one core of committed work. end gives both back; call it exactly once.
// When ctx ends first it returns a KindCanceled error or ctx's error.
func (s *Scheduler) BeginDecode(ctx context.Context) (end func(), err error) {
	release, err := s.decodes.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.Acquire(ctx, 1, 1)
	if err != nil {
		release()
		return nil, err
	}
	return func() { s.Release(n); release() }, nil
}

// BeginTranscription waits for the turn of the one transcription that runs
// at a time (a second would hold its cores idle while it waits for the
// speech engine) and then for STTThreads cores of committed work (the whole
// budget when 0). It returns the cores to start on, the grow function to
// hand the speech engine (TranscribeOptions.Grow, by the rule of Lend), and
// end, which gives back every core held and the turn; call it exactly once.
func (s *Scheduler) BeginTranscription(ctx context.Context) (threads int, grow func(most int) int, end func(), err error) {
	s.mu.Lock()
	stop := s.specCancel
	s.mu.Unlock()
	if stop != nil {
		// A committed transcription never waits for a speculative one.
		stop()
	}
	want, err := s.takeSTTTurn(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	n, err := s.Acquire(ctx, want, want)
	if err != nil {
		<-s.sttTurn
		return 0, nil, nil, err
	}
	held := n
	grow = func(most int) int {
		held = s.Lend(n, held, most)
		return held
	}
	end = func() {
		s.Release(held)
		<-s.sttTurn
	}
	return n, grow, end, nil
}

// Lend is the rule by which a transcription that was given base cores and
// holds held grows toward most: it takes free cores only while it is the
// only request in the stages (STT holds it alone, LLM none) and nobody
// waits for cores ahead of speculative work, and it gives back all but
// base as soon as either stops being true (another request's stage would
// soon want the core and wait for the transcription's next step; the load
// test's admitted requests took 13-18% longer when transcriptions borrowed
// regardless; the prompt evaluated ahead so keeps the core it was left).
// It returns the cores held now.
func (s *Scheduler) Lend(base, held, most int) int {
	if s == nil {
		return held
	}
	most = max(most, base)
	if !s.alone() || s.contendedAhead() {
		most = base
	}
	switch {
	case held > most:
		s.Release(held - most)
		held = most
	case held < most:
		held += s.TryAcquire(most - held)
	}
	return held
}

// alone reports whether one request is in the stages, in speech-to-text.
func (s *Scheduler) alone() bool {
	return s.STT.InFlight() <= 1 && s.LLM.InFlight() == 0
}

// contendedAhead reports whether anybody waits for cores at PriorityAhead
// or higher.
func (s *Scheduler) contendedAhead() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitingUpToLocked(PriorityAhead)
}

// Admit reserves a request's expected work in Work: the language model's
// recent service time, and speech-to-text's when withAudio. It returns the
// speech-to-text part (given back when that stage ends) and the release of
// Work.Admit, or ErrOverloaded.
func (s *Scheduler) Admit(withAudio bool) (stt, own time.Duration, release func(time.Duration), err error) {
	own = s.LLM.Avg()
	if withAudio {
		stt = s.STT.Avg()
		own += stt
	}
	release, err = s.Work.Admit(own)
	return stt, own, release, err
}

// BeginSpeculativeTranscription is BeginTranscription for speculative work
// (a live turn's audio heard ahead of its end): it takes the one
// transcription's turn and then between 1 and STTThreads cores at
// PrioritySpeculative. While it holds the turn, any committed or ahead work
// that comes to wait for cores, and any committed transcription that comes
// to wait for the turn, calls cancel: the speculative pass stops at the
// speech engine's next check of its context. Its grow function never
// borrows; between the encoder's steps it gives its cores to work of a
// higher priority that waits (Yield). end gives back the cores and the
// turn; call it exactly once.
func (s *Scheduler) BeginSpeculativeTranscription(ctx context.Context, cancel func()) (threads int, grow func(most int) int, end func(), err error) {
	want, err := s.takeSTTTurn(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	n, err := s.AcquireAt(ctx, PrioritySpeculative, 1, want)
	if err != nil {
		<-s.sttTurn
		return 0, nil, nil, err
	}
	if s != nil {
		s.mu.Lock()
		s.specCancel = cancel
		s.mu.Unlock()
	}
	held := n
	grow = func(int) int {
		if s == nil || s.total == 0 {
			return n
		}
		s.mu.Lock()
		yield := s.waitingUpToLocked(PriorityAhead)
		s.mu.Unlock()
		if !yield {
			return n
		}
		s.Release(held)
		h, err := s.AcquireAt(ctx, PrioritySpeculative, n, n)
		if err != nil {
			// Canceled while it waited: the engine runs on until its next
			// check of ctx; it takes its cores back as committed work, so
			// that the busy threads never exceed the budget.
			h, _ = s.Acquire(context.Background(), n, n)
		}
		held = h
		return n
	}
	end = func() {
		if s != nil {
			s.mu.Lock()
			s.specCancel = nil
			s.mu.Unlock()
		}
		s.Release(held)
		<-s.sttTurn
	}
	return n, grow, end, nil
}

// takeSTTTurn waits for the speech engine's turn (or ctx) and reports how
// many threads a transcription wants: the configured count, or every core.
// Whoever gets the turn gives it back with <-s.sttTurn.
func (s *Scheduler) takeSTTTurn(ctx context.Context) (want int, err error) {
	select {
	case s.sttTurn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	want = s.sttThreads
	if want <= 0 {
		want = s.Total()
	}
	return want, nil
}

type priorityKey struct{}

// WithPriority returns ctx carrying p: the priority at which the work done
// for ctx ahead of its request waits for cores (PriorityOf). A speculative
// pass marks its prompt work so, so that it never outranks, and never
// cancels, its own transcription or anybody's committed work.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the priority ctx carries (WithPriority), or def.
func PriorityOf(ctx context.Context, def Priority) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok {
		return p
	}
	return def
}

// StopSpeculative cancels the speculative transcription that holds the
// transcription's turn, if any, with its prompt work, and any other
// speculative work (BeginSpeculative): committed work has arrived. A committed language-model request calls it before it queues
// for the language model, which serves one job at a time.
func (s *Scheduler) StopSpeculative() {
	if s == nil {
		return
	}
	s.mu.Lock()
	stop := s.specStopsLocked()
	s.mu.Unlock()
	for _, f := range stop {
		f()
	}
}

// specStopsLocked returns the cancel functions of all speculative work.
func (s *Scheduler) specStopsLocked() []func() {
	var stop []func()
	if s.specCancel != nil {
		stop = append(stop, s.specCancel)
	}
	for _, f := range s.specWork {
		stop = append(stop, f)
	}
	return stop
}

// BeginSpeculative registers speculative work other than a transcription
// (a live turn's replies generated from a transcript heard ahead): until
// end is called, committed or ahead work that comes to wait for cores, and
// StopSpeculative (a committed request queueing for the language model),
// call cancel. The work takes its cores at PrioritySpeculative
// (WithPriority) and must stop soon after cancel.
func (s *Scheduler) BeginSpeculative(cancel func()) (end func()) {
	if s == nil {
		return func() {}
	}
	k := new(struct{})
	s.mu.Lock()
	if s.specWork == nil {
		s.specWork = map[*struct{}]func(){}
	}
	s.specWork[k] = cancel
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.specWork, k)
		s.mu.Unlock()
	}
}
