package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestStageBoundsInFlight(t *testing.T) {
	s := &Stage{Max: 2}
	d1, err1 := s.Enter(context.Background())
	d2, err2 := s.Enter(context.Background())
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := s.Enter(context.Background()); !errors.Is(err, ErrOverloaded) || KindOf(err) != KindOverloaded {
		t.Fatalf("third request: %v, want ErrOverloaded", err)
	}
	d1(time.Second)
	d1(time.Second) // a second call is ignored
	if s.InFlight() != 1 {
		t.Fatalf("in flight %d after one done", s.InFlight())
	}
	d3, err := s.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d2(0)
	d3(0)
	if s.InFlight() != 0 {
		t.Fatalf("in flight %d", s.InFlight())
	}
}

func TestStageRefusesWhatCannotMeetItsDeadline(t *testing.T) {
	s := &Stage{}
	// Learn a service time of 4 s.
	d, _ := s.Enter(context.Background())
	d(4 * time.Second)

	busy, _ := s.Enter(context.Background()) // one request being served
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dones []func(time.Duration)
	// 1 ahead + own = 8 s ... up to 6 ahead + own = 28 s fit in 30 s.
	for i := 0; i < 6; i++ {
		di, err := s.Enter(ctx)
		if err != nil {
			t.Fatalf("request %d refused: %v", i, err)
		}
		dones = append(dones, di)
	}
	// 7 ahead + own = 32 s > 30 s.
	if _, err := s.Enter(ctx); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("request that cannot meet its deadline: %v", err)
	}
	// Without a deadline there is no such bound.
	dn, err := s.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dn(0)
	busy(0)
	for _, di := range dones {
		di(0)
	}
	if s.InFlight() != 0 {
		t.Fatal(s.InFlight())
	}
}

func TestStageConcurrent(t *testing.T) {
	s := &Stage{Max: 5}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, peak := 0, 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Enter(context.Background())
			if err != nil {
				return
			}
			mu.Lock()
			admitted++
			if n := s.InFlight(); n > peak {
				peak = n
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			d(time.Millisecond)
		}()
	}
	wg.Wait()
	if peak > 5 || admitted == 0 || s.InFlight() != 0 {
		t.Fatalf("peak %d admitted %d left %d", peak, admitted, s.InFlight())
	}
}

func TestWorkloadBoundsTheWait(t *testing.T) {
	w := &Workload{MaxWaitRatio: 1}
	r1, err := w.Admit(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 2 s ahead of a 2 s request: a wait of 1x its work is admitted.
	r2, err := w.Admit(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 4 s ahead of a 3 s request is more than 1x: refused at once.
	if _, err := w.Admit(3 * time.Second); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third request: %v, want ErrOverloaded", err)
	}
	// The first request's speech-to-text (1.5 s) is done, then the rest.
	r1(1500 * time.Millisecond)
	if _, err := w.Admit(3 * time.Second); err != nil {
		t.Fatalf("with 2.5 s ahead a 3 s request: %v", err)
	}
	r1(time.Hour) // gives back only what is left of its 2 s
	r2(2 * time.Second)
	if got := w.Outstanding(); got != 3*time.Second {
		t.Fatalf("outstanding %v, want the third request's 3 s", got)
	}
	// Before any service time is known, everything is admitted.
	if _, err := (&Workload{MaxWaitRatio: 1}).Admit(0); err != nil {
		t.Fatal(err)
	}
}

// stubSTT and stubLLM are the smallest engines for admission tests.
type stubSTT struct{}

func (stubSTT) Transcribe(context.Context, []float32, TranscribeOptions) (Transcript, error) {
	return Transcript{Text: "hi", Language: "en"}, nil
}

type stubLLM struct{}

func (stubLLM) Generate(context.Context, GenerateRequest) (Generation, error) {
	return Generation{Candidates: []Candidate{{Text: "ok"}}}, nil
}

// TestAdmissionBeforeDecode: a recording the speech-to-text stage refuses
// is never decoded, and decodes run within the scheduler's decode limit.
func TestAdmissionBeforeDecode(t *testing.T) {
	var mu sync.Mutex
	decoded, running, peak := 0, 0, 0
	gate := make(chan struct{})
	p := &Pipeline{
		Decode: func([]byte, time.Duration) ([]float32, error) {
			mu.Lock()
			decoded++
			running++
			peak = max(peak, running)
			mu.Unlock()
			<-gate
			mu.Lock()
			running--
			mu.Unlock()
			return make([]float32, 16000), nil
		},
		STT:      stubSTT{},
		LLM:      stubLLM{},
		MaxAudio: time.Minute,
		Sched:    NewScheduler(SchedulerConfig{STTQueue: 3, MaxDecodes: 2}),
	}
	req := Request{Messages: []Message{{Role: RoleSpeaker, Audio: true}}, Audio: []byte("RIFF")}

	errs := make(chan error, 5)
	for i := 0; i < 3; i++ {
		go func() { _, err := p.Infer(context.Background(), req); errs <- err }()
	}
	// Wait until the stage is full (two decoding, one waiting for a slot).
	for deadline := time.Now().Add(5 * time.Second); p.Sched.STT.InFlight() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stage did not fill")
		}
	}
	// A fourth is refused at admission, undecoded.
	if _, err := p.Infer(context.Background(), req); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("fourth request: %v, want ErrOverloaded", err)
	}
	mu.Lock()
	if decoded != 2 || peak != 2 {
		t.Errorf("decoded %d (peak %d at once) while the stage was full; want 2 and 2", decoded, peak)
	}
	mu.Unlock()
	close(gate)
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Errorf("admitted request: %v", err)
		}
	}
	if p.Sched.STT.InFlight() != 0 {
		t.Errorf("%d left in the stage", p.Sched.STT.InFlight())
	}
	// A decode error leaves the stage too.
	p.Decode = func([]byte, time.Duration) ([]float32, error) { return nil, errors.New("bad") }
	if _, err := p.Infer(context.Background(), req); KindOf(err) != KindUnsupportedAudio {
		t.Errorf("decode error: %v", err)
	}
	if p.Sched.STT.InFlight() != 0 {
		t.Errorf("a failed decode left %d in the stage", p.Sched.STT.InFlight())
	}
}

func TestSlotsCanceled(t *testing.T) {
	s := &Slots{Max: 1}
	release, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx); KindOf(err) != KindCanceled {
		t.Errorf("waiting past the deadline: %v", err)
	}
	release()
	release() // twice is harmless
	r2, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r2()
}
