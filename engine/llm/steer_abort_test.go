package llm

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// TestSupersededKeystrokeFreesSteeredDecode: a steered request superseded
// by the next keystroke (the API cancels the older request of the same key
// and dialog_id, answering it 409 superseded) stops inside the generation
// step it is running, makes no other decode, and the keystroke queued
// behind it runs next on the dialog's cached prompt and meets its own
// constraint. That is the bound client.md states for a replaced request (at
// most one step of the model's computation graph, not delaying the new
// one), shown by the order of the decodes rather than by timing.
func TestSupersededKeystrokeFreesSteeredDecode(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 16, MaxCandidates: 3})
	turn := request(3, 7)
	turn.DialogID = "spell"
	mustGenerate(t, e, turn) // the turn the keystrokes refine: its prompt is cached
	a, b := turn, turn
	a.Steer = &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l"}}
	b.Steer = &engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var order []string // decodes started, by request
	phase := "A"
	next := make(chan engine.Generation, 1)
	nextErr := make(chan error, 1)
	e.decodeHook = func(step int) {
		mu.Lock()
		order = append(order, phase)
		p := phase
		mu.Unlock()
		if p != "A" || step != 2 {
			return
		}
		// The next keystroke queues behind the steered request...
		mu.Lock()
		phase = "B"
		mu.Unlock()
		go func() {
			g, err := e.Generate(context.Background(), b)
			next <- g
			nextErr <- err
		}()
		for {
			e.mu.Lock()
			queued := len(e.pending)
			e.mu.Unlock()
			if queued == 1 {
				break
			}
			runtime.Gosched()
		}
		// ...and supersedes it as its third decode (a generation step)
		// starts: the abort flag is up before llama.cpp begins.
		cancel()
		for atomic.LoadInt32(e.lctx.abort.p) == 0 {
			runtime.Gosched()
		}
	}
	defer func() { e.decodeHook = nil }()
	if _, err := e.Generate(ctx, a); engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("superseded steered request: err = %v, want KindCanceled", err)
	}
	var got engine.Generation
	select {
	case got = <-next:
	case <-time.After(5 * time.Minute):
		t.Fatal("the next keystroke never ran")
	}
	if err := <-nextErr; err != nil {
		t.Fatalf("next keystroke: %v", err)
	}
	e.decodeHook = nil
	mu.Lock()
	defer mu.Unlock()
	if len(order) < 4 || strings.Join(order[:4], "") != "AAAB" || strings.Contains(strings.Join(order[3:], ""), "A") {
		t.Errorf("decodes by request: %v, want A A A then B only", order)
	}
	if len(got.Candidates) == 0 {
		t.Errorf("the next keystroke got no candidate")
	}
	for _, c := range got.Candidates {
		if !steer.Matches(*b.Steer, c.Text) {
			t.Errorf("candidate %q breaks the next keystroke's constraint %v", c.Text, b.Steer.Words)
		}
	}
	if got.CachedTokens == 0 {
		t.Errorf("the next keystroke found none of the dialog's prompt cached")
	}
	if v := atomic.LoadInt32(e.lctx.abort.p); v != 0 {
		t.Errorf("abort flag left at %d", v)
	}
	t.Logf("next keystroke: queue %v, %d of %d prompt tokens cached, %d candidates", got.Queue, got.CachedTokens, got.PromptTokens, len(got.Candidates))
}
