package llm

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
)

// longDialog is a dialog of turns turns of words words each, made of the
// demo vocabulary's words, ending with the partner's turn.
func longDialog(turns, words int) []engine.Message {
	w := DemoWords()
	var msgs []engine.Message
	k := 0
	for i := 0; i < turns; i++ {
		var sb strings.Builder
		for j := 0; j < words; j++ {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(w[k%len(w)])
			k += 7
		}
		role := engine.RoleSpeaker
		if (turns-1-i)%2 == 1 {
			role = engine.RoleDisabledPerson
		}
		msgs = append(msgs, engine.Message{Role: role, Content: sb.String()})
	}
	return msgs
}

// TestCancelAbortsRunningDecode: a request cancelled while llama.cpp
// evaluates a chunk of its long prompt stops inside that decode (the chunk
// does not complete: llama.cpp's abort callback), starts no other decode,
// frees the engine for the request queued behind it, whose decodes come
// next, and keeps the chunks it evaluated before: the retry reuses exactly
// them and answers as a request that was never cancelled.
func TestCancelAbortsRunningDecode(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 2, ContextPerSeq: 4096})
	long := request(2, 5)
	long.Messages = longDialog(50, 40)
	long.DialogID = "long"

	got := cancelAtThirdDecode(t, e, long, long, "cancelled request", "retry")
	// What the request gives when nothing interrupts it: on another
	// dialog, evaluated from scratch after a short one took the context.
	mustGenerate(t, e, request(2, 1))
	ref := long
	ref.DialogID = "reference"
	want := mustGenerate(t, e, ref)
	if want.CachedTokens > 100 || want.PromptTokens <= 3*promptChunk {
		t.Fatalf("reference: %d of %d prompt tokens cached, want a cold prompt of more than 3 chunks", want.CachedTokens, want.PromptTokens)
	}
	if got.CachedTokens != 2*promptChunk {
		t.Errorf("the retry reused %d tokens, want the %d of the two chunks evaluated before the abort", got.CachedTokens, 2*promptChunk)
	}
	if d := cmp.Diff(texts(want), texts(got)); d != "" {
		t.Errorf("the retry answers differently from an uninterrupted request (-want +got):\n%s", d)
	}
	if v := atomic.LoadInt32(e.lctx.abort.p); v != 0 {
		t.Errorf("abort flag left at %d", v)
	}
	t.Logf("retry: queue %v, prompt %v for %d new tokens", got.Queue, got.Prompt, got.PromptTokens-got.CachedTokens)
}

// cancelAtThirdDecode runs first and, as its third decode starts (the abort
// flag up before llama.cpp begins), queues next behind it and cancels it. It
// checks that first fails as cancelled and that the decodes ran as first's
// three (the third aborted) then only next's, and returns next's generation.
// firstName and nextName name the two requests in failures.
func cancelAtThirdDecode(t *testing.T, e *Engine, first, next engine.GenerateRequest, firstName, nextName string) engine.Generation {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var order []string // decodes started, by request
	phase := "A"
	done := make(chan engine.Generation, 1)
	doneErr := make(chan error, 1)
	e.decodeHook = func(step int) {
		mu.Lock()
		order = append(order, phase)
		p := phase
		mu.Unlock()
		if p != "A" || step != 2 {
			return
		}
		// The next request queues behind the running one...
		mu.Lock()
		phase = "B"
		mu.Unlock()
		go func() {
			g, err := e.Generate(context.Background(), next)
			done <- g
			doneErr <- err
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
		// ...and the running one is cancelled as its third decode starts:
		// the flag is up before llama.cpp begins.
		cancel()
		for atomic.LoadInt32(e.lctx.abort.p) == 0 {
			runtime.Gosched()
		}
	}
	defer func() { e.decodeHook = nil }()
	if _, err := e.Generate(ctx, first); engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("%s: err = %v, want KindCanceled", firstName, err)
	}
	var got engine.Generation
	select {
	case got = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the %s never ran", nextName)
	}
	if err := <-doneErr; err != nil {
		t.Fatalf("%s: %v", nextName, err)
	}
	e.decodeHook = nil
	mu.Lock()
	defer mu.Unlock()
	// A's three decodes (the third aborted), then only B's.
	if len(order) < 4 || strings.Join(order[:4], "") != "AAAB" || strings.Contains(strings.Join(order[3:], ""), "A") {
		t.Errorf("decodes by request: %v, want A A A then B only", order)
	}
	return got
}

// TestAbortFlagIsPerRequest: a context that is done after its request
// ended does not abort the next request's decodes.
func TestAbortFlagIsPerRequest(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 2})
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := e.Generate(ctx, request(2, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if v := atomic.LoadInt32(e.lctx.abort.p); v != 0 {
		t.Fatalf("abort flag %d after the request ended and its context was cancelled", v)
	}
	mustGenerate(t, e, request(2, 1))
}
