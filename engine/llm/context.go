package llm

/*
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

// replyd_context_params is llama.h's struct llama_context_params of the
// llama.cpp that github.com/ollama/ollama v0.17.4 vendors, field for field
// (enums are ints, callbacks pointers). The binding builds the struct but
// exposes no setter for kv_unified or embeddings; checkParamsLayout proves
// this copy matches the binding's before Open writes through it.
struct replyd_context_params {
	uint32_t n_ctx;
	uint32_t n_batch;
	uint32_t n_ubatch;
	uint32_t n_seq_max;
	int32_t  n_threads;
	int32_t  n_threads_batch;
	int      rope_scaling_type;
	int      pooling_type;
	int      attention_type;
	int      flash_attn_type;
	float    rope_freq_base;
	float    rope_freq_scale;
	float    yarn_ext_factor;
	float    yarn_attn_factor;
	float    yarn_beta_fast;
	float    yarn_beta_slow;
	uint32_t yarn_orig_ctx;
	float    defrag_thold;
	void *   cb_eval;
	void *   cb_eval_user_data;
	int      type_k;
	int      type_v;
	void *   abort_callback;
	void *   abort_callback_data;
	bool     embeddings;
	bool     offload_kqv;
	bool     no_perf;
	bool     op_offload;
	bool     swa_full;
	bool     kv_unified;
};

struct llama_context;
struct llama_model;
struct llama_vocab;

float *  llama_get_logits_ith(struct llama_context * ctx, int32_t i);
void     llama_set_n_threads(struct llama_context * ctx, int32_t n_threads, int32_t n_threads_batch);
uint32_t llama_n_ctx(const struct llama_context * ctx);
const struct llama_model * llama_get_model(const struct llama_context * ctx);
const struct llama_vocab * llama_model_get_vocab(const struct llama_model * model);
size_t   llama_state_seq_get_size(struct llama_context * ctx, int32_t seq_id);
size_t   llama_state_seq_get_data(struct llama_context * ctx, uint8_t * dst, size_t size, int32_t seq_id);
size_t   llama_state_seq_set_data(struct llama_context * ctx, const uint8_t * src, size_t size, int32_t dest_seq_id);
void     llama_free(struct llama_context * ctx);
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"
)

// kvContext is the llama.cpp context of an Engine with the calls the binding
// does not wrap: logits read in place, the thread count per decode, and a
// sequence's KV cells saved to and restored from Go memory.
type kvContext struct {
	*llama.Context
	raw     *C.struct_llama_context
	nVocab  int
	threads int
	abort   abortFlag // stops a running decode (abort.go)
}

// contextConfig is what newKVContext needs to size the context.
type contextConfig struct {
	cells   int // KV cells shared by every sequence
	seqs    int
	threads int
	// gpu: the layers run on a GPU backend, where llama.cpp decides on
	// flash attention itself.
	gpu bool
}

// newKVContext creates a context whose sequences share one pool of KV cells
// (llama.cpp's unified KV cache): copying a prompt to the candidate
// sequences only tags its cells, and the pool is sized for one prompt and
// the replies, not for every sequence. Embeddings are not extracted.
//
// On the CPU, attention runs as two matrix products and a softmax, not as
// llama.cpp's fused flash-attention kernel (which its "auto" setting picks
// on every backend): the CPU kernel walks the cached cells one query row at
// a time, so attention over a long dialog dominated every turn. Profiled
// on Qwen2.5-0.5B's shape (docs/performance-conversation.md), attention
// cost 1.9x the weights' products in a 159-token prompt chunk after 2,560
// cached tokens with the fused kernel and 0.66x without; 0.34x and 0.12x in
// a decode step of 3 sequences. The compute buffer is the same size either
// way (the logits of a whole batch dominate it).
func newKVContext(model *llama.Model, cfg contextConfig) (*kvContext, error) {
	fa := ml.FlashAttentionDisabled
	if cfg.gpu {
		fa = ml.FlashAttentionAuto
	}
	cp := llama.NewContextParams(cfg.cells, promptChunk, cfg.seqs, cfg.threads, fa, "")
	p, err := paramsOf(&cp)
	if err != nil {
		return nil, err
	}
	p.kv_unified = true
	p.embeddings = false
	p.n_batch = C.uint32_t(promptChunk)
	lctx, err := llama.NewContextWithModel(model, cp)
	if err != nil {
		return nil, err
	}
	// The binding keeps the C pointer as the first field of Context and
	// Model and has no accessor; check it before trusting it.
	raw := *(**C.struct_llama_context)(unsafe.Pointer(lctx))
	rawModel := *(**C.struct_llama_model)(unsafe.Pointer(model))
	if raw == nil || C.llama_get_model(raw) != rawModel ||
		unsafe.Pointer(C.llama_model_get_vocab(rawModel)) != unsafe.Pointer(model.Vocab()) {
		return nil, errors.New("the llama.cpp binding's context layout is not the expected one")
	}
	if got := int(C.llama_n_ctx(raw)); got < cfg.cells {
		return nil, fmt.Errorf("llama.cpp made a context of %d cells, not %d", got, cfg.cells)
	}
	abort, err := setAbort(raw)
	if err != nil {
		return nil, err
	}
	return &kvContext{Context: lctx, raw: raw, nVocab: model.NumVocab(), threads: cfg.threads, abort: abort}, nil
}

// paramsOf returns the C struct inside the binding's ContextParams after
// checking that replyd_context_params lays it out the same way: the size
// matches and fields the binding set read back as set.
func paramsOf(cp *llama.ContextParams) (*C.struct_replyd_context_params, error) {
	if unsafe.Sizeof(*cp) != unsafe.Sizeof(C.struct_replyd_context_params{}) {
		return nil, fmt.Errorf("llama_context_params is %d bytes, replyd expects %d", unsafe.Sizeof(*cp), unsafe.Sizeof(C.struct_replyd_context_params{}))
	}
	p := (*C.struct_replyd_context_params)(unsafe.Pointer(cp))
	probe := llama.NewContextParams(12345, 77, 3, 5, ml.FlashAttentionDisabled, "q8_0")
	q := (*C.struct_replyd_context_params)(unsafe.Pointer(&probe))
	const ggmlTypeQ8 = 8
	if q.n_ctx != 12345 || q.n_ubatch != 77 || q.n_batch != 77*3 || q.n_seq_max != 3 || q.n_threads != 5 ||
		q.n_threads_batch != 5 || q.type_k != ggmlTypeQ8 || q.type_v != ggmlTypeQ8 || !bool(q.embeddings) {
		return nil, errors.New("llama_context_params does not have the layout replyd expects")
	}
	return p, nil
}

// setThreads sets the threads of the next decodes.
func (c *kvContext) setThreads(n int) {
	if n != c.threads {
		C.llama_set_n_threads(c.raw, C.int32_t(n), C.int32_t(n))
		c.threads = n
	}
}

// logits returns the logits of the i-th output of the last decode, in
// llama.cpp's own buffer: valid until the next decode.
func (c *kvContext) logits(i int) []float32 {
	p := C.llama_get_logits_ith(c.raw, C.int32_t(i))
	if p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), c.nVocab)
}

// saveSeq copies sequence seq's KV cells into Go memory.
func (c *kvContext) saveSeq(seq int) ([]byte, error) {
	n := C.llama_state_seq_get_size(c.raw, C.int32_t(seq))
	if n == 0 {
		return nil, errors.New("llama.cpp reports an empty sequence state")
	}
	buf := make([]byte, int(n))
	if got := C.llama_state_seq_get_data(c.raw, (*C.uint8_t)(unsafe.Pointer(&buf[0])), n, C.int32_t(seq)); got != n {
		return nil, fmt.Errorf("llama.cpp wrote %d of %d bytes of sequence state", got, n)
	}
	return buf, nil
}

// restoreSeq replaces sequence seq's cells with a state saveSeq returned.
func (c *kvContext) restoreSeq(seq int, state []byte) error {
	if len(state) == 0 {
		return errors.New("empty sequence state")
	}
	if C.llama_state_seq_set_data(c.raw, (*C.uint8_t)(unsafe.Pointer(&state[0])), C.size_t(len(state)), C.int32_t(seq)) == 0 {
		return errors.New("llama.cpp could not restore the sequence state")
	}
	return nil
}

// free releases the llama.cpp context (its KV cache and compute buffers).
// Nothing may use k afterwards; the Engine calls it once its owner
// goroutine has stopped.
func (k *kvContext) free() {
	if k.raw != nil {
		C.llama_free(k.raw)
		k.raw = nil
		k.Context = nil
	}
}
