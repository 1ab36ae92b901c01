package llm

/*
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

struct llama_context;
typedef bool (*replyd_abort_callback)(void * data);

// llama.h: void llama_set_abort_callback(struct llama_context * ctx,
// ggml_abort_callback abort_callback, void * abort_callback_data), where
// ggml_abort_callback is bool (*)(void * data). Checked by
// TestPrototypesMatchLlamaH.
void llama_set_abort_callback(struct llama_context * ctx, replyd_abort_callback cb, void * data);

// replyd_abort reads the flag replyd sets when the running request is
// cancelled. ggml's CPU backend calls it on its first thread after every
// node of the graph, so it must be cheap and must not call into Go.
static bool replyd_abort(void * data) {
	return __atomic_load_n((int32_t *) data, __ATOMIC_RELAXED) != 0;
}

static int32_t * replyd_set_abort(struct llama_context * ctx) {
	int32_t * flag = calloc(1, sizeof(int32_t));
	if (flag != NULL) {
		llama_set_abort_callback(ctx, replyd_abort, flag);
	}
	return flag;
}
*/
import "C"

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/ollama/ollama/llama"
)

// A request's work stops with it: when its context is done while a decode
// runs, the abort flag makes ggml stop that decode after the graph node it
// is computing (well under 100 ms of work on a CPU, where a whole 512-token
// prompt chunk of Qwen2.5-1.5B takes seconds), and llama.cpp takes the
// aborted chunk's positions back out of the KV cache, so the sequence holds
// exactly the chunks evaluated before it.

// abortFlag is the C memory llama.cpp's abort callback reads; it is never
// freed, like the context it belongs to.
type abortFlag struct {
	p *int32
}

// setAbort installs the abort callback on the context.
func setAbort(raw *C.struct_llama_context) (abortFlag, error) {
	p := C.replyd_set_abort(raw)
	if p == nil {
		return abortFlag{}, errors.New("cannot allocate the abort flag")
	}
	return abortFlag{p: (*int32)(p)}, nil
}

// on makes decodes abort from the moment ctx is done until the returned stop
// is called; stop waits until the flag is down again, so a later decode of
// another request is not aborted by this one.
func (f abortFlag) on(ctx context.Context) (stop func()) {
	if f.p == nil || ctx.Done() == nil {
		return func() {}
	}
	raised := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		abortsRaised.Add(1)
		atomic.StoreInt32(f.p, 1)
		close(raised)
	})
	return func() {
		if !cancel() {
			<-raised
			atomic.StoreInt32(f.p, 0)
			abortsRaised.Add(-1)
		}
	}
}

// abortsRaised counts the abort flags up: while one is, the errors
// llama.cpp logs about the aborted computation are the abort's, expected,
// and logged at debug level (replydLlamaLog).
var abortsRaised atomic.Int32

// aborted tells whether err from a decode was the abort: llama_decode
// returns 2 for an abort, which the binding reports as ErrKvCacheFull, the
// error of its return value 1 too. Only a done context makes it an abort.
func aborted(ctx context.Context, err error) bool {
	return errors.Is(err, llama.ErrKvCacheFull) && ctx.Err() != nil
}
