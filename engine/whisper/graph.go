package whisper

/*
#include <stdlib.h>
#include "graph.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	// The ggml that ollama vendors: its base library and CPU backend are
	// compiled by this package; importing it links them into every binary
	// that imports engine/whisper (replyd's and this package's tests), and
	// its OnceLoad loads the GPU backends installed beside the binary.
	ggml "github.com/ollama/ollama/ml/backend/ggml/ggml/src"
)

// Compute paths: where a Model's encoder and decoder run (Options.Compute).
const (
	// ComputeBLAS is replyd's own kernels and OpenBLAS (blas.go), the
	// default: the faster of the two on the CPU (docs/speech.md).
	ComputeBLAS = "blas"
	// ComputeGGMLCPU runs the ggml graphs (graph.c) on ggml's CPU backend.
	ComputeGGMLCPU = "ggml-cpu"
	// ComputeGPU runs the ggml graphs on the first GPU backend ggml has
	// loaded (CUDA where docs/gpu.md installs it).
	ComputeGPU = "gpu"
)

// graph is a Model's ggml compute path: the weights as ggml tensors of the
// file's own types on one backend, the encoder's state and the decoder's
// K/V caches.
type graph struct {
	c       *C.rdg_model
	ctx     *C.struct_ggml_context // the tensors' metadata
	buf     *C.struct_ggml_backend_buffer
	cpu     bool
	threads int
	name    string
	packed  []float32 // a short window's mel frames (setMel)
	tok     []int32
	// What was placed where (String): the device, its free and
	// total memory before loading, the weights and state, the compute
	// buffers of every graph at its largest.
	device                 string
	devFree, devTotal      int64
	weightBytes, compBytes int64
}

// ErrPlacement is wrapped by the errors of a graph path that could not be
// placed on its backend: no GPU backend, too little free memory for the
// model (and Options.DeviceReserve), a failed allocation.
var ErrPlacement = errors.New("whisper: the ggml compute path cannot be placed")

// mib formats a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%d MiB", (n+1<<20-1)>>20) }

// GPUPresent loads ggml's backends (once; see docs/gpu.md) and reports
// whether one of them is a GPU, where ComputeGPU can run.
func GPUPresent() bool {
	ggml.OnceLoad()
	for i := C.size_t(0); i < C.ggml_backend_dev_count(); i++ {
		if C.ggml_backend_dev_type(C.ggml_backend_dev_get(i)) == C.RDG_DEV_GPU {
			return true
		}
	}
	return false
}

// Backend names the ggml backend the model computes on ("CPU", "CUDA0"),
// or "" on the BLAS path.
func (m *Model) Backend() string {
	if m.gg == nil {
		return ""
	}
	return m.gg.name
}

// errGraph is a failure of the ggml path (allocation or computation).
var errGraph = errors.New("whisper: ggml graph failed")

// maxBatch is the most tokens the decoder is given at once: a window's
// prompt, <|startofprev|>, the previous windows' n_text_ctx/2-1 tokens and
// the start prompt (4 at most), as runWith builds it.
func maxBatch(hp HParams) int { return min(hp.NTextCtx, hp.NTextCtx/2+4) }

// newGraph puts m's weights on a ggml backend: the CPU's, or with gpu the
// first GPU backend loaded (an error when there is none). It checks the
// device's free memory (ggml_backend_dev_memory) before it allocates:
// the weights and state, then the compute buffers of every graph at its
// largest, with reserve bytes left for the language model on the same
// device; then it allocates all of it, so that a turn never allocates.
// Every failure is an error wrapping ErrPlacement.
func newGraph(m *Model, gpu bool, reserve int64) (_ *graph, err error) {
	hp := m.hp
	g := &graph{}
	defer func() {
		if err != nil {
			g.free()
		}
	}()
	g.c = (*C.rdg_model)(C.calloc(1, C.size_t(unsafe.Sizeof(C.rdg_model{}))))
	c := g.c
	if gpu {
		ggml.OnceLoad()
		c.backend = C.ggml_backend_init_by_type(C.RDG_DEV_GPU, nil)
		if c.backend == nil {
			return nil, fmt.Errorf("%w: no GPU backend is loaded (see docs/gpu.md)", ErrPlacement)
		}
	} else {
		c.backend = C.ggml_backend_cpu_init()
		g.cpu = true
	}
	g.name = C.GoString(C.ggml_backend_name(c.backend))
	var free, total C.size_t
	g.device = C.GoString(C.rdg_device_memory(c, &free, &total))
	g.devFree, g.devTotal = int64(free), int64(total)
	c.n_mels, c.n_frames = C.int(hp.NMels), C.int(windowFrames)
	c.n_audio_ctx, c.d_audio, c.nh_audio, c.n_audio_layer = C.int(hp.NAudioCtx), C.int(hp.NAudioState), C.int(hp.NAudioHead), C.int(hp.NAudioLayer)
	c.n_text_ctx, c.d_text, c.nh_text, c.n_text_layer = C.int(hp.NTextCtx), C.int(hp.NTextState), C.int(hp.NTextHead), C.int(hp.NTextLayer)
	c.n_vocab, c.tok_type = C.int(hp.NVocab), C.int(m.tokEmb.typ)

	nTensors := 16 + 24*(len(m.enc)+len(m.dec)) + 4*len(m.dec)
	p := C.struct_ggml_init_params{mem_size: C.size_t(nTensors) * C.ggml_tensor_overhead(), no_alloc: true}
	g.ctx = C.ggml_init(p)
	if g.ctx == nil {
		return nil, errGraph
	}
	type upload struct {
		t    *C.struct_ggml_tensor
		data unsafe.Pointer
		n    int
	}
	var ups []upload
	vec := func(v []float32, ne ...int) *C.struct_ggml_tensor {
		var t *C.struct_ggml_tensor
		switch len(ne) {
		case 1:
			t = C.ggml_new_tensor_1d(g.ctx, C.RDG_F32, C.int64_t(ne[0]))
		case 2:
			t = C.ggml_new_tensor_2d(g.ctx, C.RDG_F32, C.int64_t(ne[0]), C.int64_t(ne[1]))
		default:
			t = C.ggml_new_tensor_3d(g.ctx, C.RDG_F32, C.int64_t(ne[0]), C.int64_t(ne[1]), C.int64_t(ne[2]))
		}
		ups = append(ups, upload{t, unsafe.Pointer(&v[0]), 4 * len(v)})
		return t
	}
	mat := func(w *weight) *C.struct_ggml_tensor {
		t := C.ggml_new_tensor_2d(g.ctx, C.int(w.typ), C.int64_t(w.cols), C.int64_t(w.rows))
		if w.typ == typeF32 {
			ups = append(ups, upload{t, unsafe.Pointer(&w.f32[0]), 4 * len(w.f32)})
		} else {
			ups = append(ups, upload{t, unsafe.Pointer(&w.raw[0]), w.rows * w.rowBytes})
		}
		return t
	}
	state := func(typ C.int, ne0, ne1 int) *C.struct_ggml_tensor {
		return C.ggml_new_tensor_2d(g.ctx, typ, C.int64_t(ne0), C.int64_t(ne1))
	}
	d, dt := hp.NAudioState, hp.NTextState
	c.conv1_w = vec(m.conv1w, 3, hp.NMels, d)
	c.conv1_b = vec(m.conv1b, d)
	c.conv2_w = vec(m.conv2w, 3, d, d)
	c.conv2_b = vec(m.conv2b, d)
	c.enc_pos = vec(m.encPos, d, hp.NAudioCtx)
	c.enc_ln_w, c.enc_ln_b = vec(m.encLn.w, d), vec(m.encLn.b, d)
	c.dec_pos = vec(m.decPos, dt, hp.NTextCtx)
	c.tok_emb = mat(m.tokEmb)
	c.dec_ln_w, c.dec_ln_b = vec(m.decLn.w, dt), vec(m.decLn.b, dt)
	blocks := func(bs []block, n int) *C.rdg_block {
		arr := (*C.rdg_block)(C.calloc(C.size_t(len(bs)), C.size_t(unsafe.Sizeof(C.rdg_block{}))))
		cs := unsafe.Slice(arr, len(bs))
		for i := range bs {
			b, cb := &bs[i], &cs[i]
			cb.attn_ln_w, cb.attn_ln_b = vec(b.attnLn.w, n), vec(b.attnLn.b, n)
			cb.q_w, cb.q_b, cb.k_w = mat(b.attn.q), vec(b.attn.qb, n), mat(b.attn.k)
			cb.v_w, cb.v_b, cb.o_w, cb.o_b = mat(b.attn.v), vec(b.attn.vb, n), mat(b.attn.o), vec(b.attn.ob, n)
			if b.cross.q != nil {
				cb.cross_ln_w, cb.cross_ln_b = vec(b.crossLn.w, n), vec(b.crossLn.b, n)
				cb.cq_w, cb.cq_b, cb.ck_w = mat(b.cross.q), vec(b.cross.qb, n), mat(b.cross.k)
				cb.cv_w, cb.cv_b, cb.co_w, cb.co_b = mat(b.cross.v), vec(b.cross.vb, n), mat(b.cross.o), vec(b.cross.ob, n)
			}
			cb.mlp_ln_w, cb.mlp_ln_b = vec(b.mlpLn.w, n), vec(b.mlpLn.b, n)
			cb.fc1_w, cb.fc1_b = mat(b.fc1), vec(b.fc1b, 4*n)
			cb.fc2_w, cb.fc2_b = mat(b.fc2), vec(b.fc2b, n)
		}
		return arr
	}
	c.enc = blocks(m.enc, d)
	c.dec = blocks(m.dec, dt)
	c.mel = state(C.RDG_F32, windowFrames, hp.NMels)
	c.enc_x = state(C.RDG_F32, d, hp.NAudioCtx)
	ptrs := func() **C.struct_ggml_tensor {
		return (**C.struct_ggml_tensor)(C.calloc(C.size_t(len(m.dec)), C.size_t(unsafe.Sizeof(uintptr(0)))))
	}
	c.k_self, c.v_self, c.k_cross, c.v_cross = ptrs(), ptrs(), ptrs(), ptrs()
	for l := range m.dec {
		unsafe.Slice(c.k_self, len(m.dec))[l] = state(C.RDG_F16, dt, hp.NTextCtx)
		unsafe.Slice(c.v_self, len(m.dec))[l] = state(C.RDG_F16, hp.NTextCtx, dt)
		unsafe.Slice(c.k_cross, len(m.dec))[l] = state(C.RDG_F16, dt, hp.NAudioCtx)
		unsafe.Slice(c.v_cross, len(m.dec))[l] = state(C.RDG_F16, hp.NAudioCtx, dt)
	}
	buft := C.ggml_backend_get_default_buffer_type(c.backend)
	g.weightBytes = int64(C.ggml_backend_alloc_ctx_tensors_from_buft_size(g.ctx, buft))
	if need := g.weightBytes + reserve; need > g.devFree {
		return nil, fmt.Errorf("%w: %s", ErrPlacement, g.short(need, "its weights and caches"))
	}
	g.buf = C.rdg_alloc_tensors(g.ctx, c.backend)
	if g.buf == nil {
		return nil, fmt.Errorf("%w: allocating %s on %s for the weights and caches failed", ErrPlacement, mib(g.weightBytes), g.name)
	}
	for _, u := range ups {
		C.ggml_backend_tensor_set(u.t, u.data, 0, C.size_t(u.n))
	}
	c.alloc = C.ggml_gallocr_new(buft)
	c.alloc_logits = C.ggml_gallocr_new(buft)
	if c.alloc == nil || c.alloc_logits == nil {
		return nil, fmt.Errorf("%w: no graph allocator on %s", ErrPlacement, g.name)
	}
	var comp C.size_t
	switch C.rdg_reserve(c, C.int(maxBatch(hp)), 1, &comp) {
	case 0:
	case -2:
		return nil, fmt.Errorf("%w: %s cannot run ggml's %s op (ggml_backend_supports_op)", ErrPlacement, g.name, C.GoString(c.unsupported))
	default:
		return nil, fmt.Errorf("%w: measuring the graphs on %s failed", ErrPlacement, g.name)
	}
	g.compBytes = int64(comp)
	if need := g.weightBytes + g.compBytes + reserve; need > g.devFree {
		return nil, fmt.Errorf("%w: %s", ErrPlacement, g.short(need, "its weights, caches and compute buffers"))
	}
	if C.rdg_reserve(c, C.int(maxBatch(hp)), 0, nil) != 0 {
		return nil, fmt.Errorf("%w: allocating %s on %s for the compute buffers failed", ErrPlacement, mib(g.compBytes), g.name)
	}
	return g, nil
}

// short says that need bytes (what, and reserve for the language model)
// do not fit in the device's free memory.
func (g *graph) short(need int64, what string) string {
	return fmt.Sprintf("%s (%s) needs %s for %s and the language model, of %s free (%s in all)",
		g.name, g.device, mib(need), what, mib(g.devFree), mib(g.devTotal))
}

// String says what the graph placed where, for the start-up log.
func (g *graph) String() string {
	return fmt.Sprintf("%s (%s): weights and caches %s, compute %s; %s free of %s before loading",
		g.name, g.device, mib(g.weightBytes), mib(g.compBytes), mib(g.devFree), mib(g.devTotal))
}

// bytes returns the backend memory the weights and state take.
func (g *graph) bytes() int64 {
	if g == nil || g.buf == nil {
		return 0
	}
	n := int64(C.ggml_backend_buffer_get_size(g.buf))
	for _, a := range []*C.struct_ggml_gallocr{g.c.alloc, g.c.alloc_logits} {
		if a != nil {
			n += int64(C.ggml_gallocr_get_buffer_size(a, 0))
		}
	}
	return n
}

// setThreads sets the CPU backend's threads (the GPU's need none).
func (g *graph) setThreads(n int) {
	if g.cpu && n != g.threads {
		C.ggml_backend_cpu_set_n_threads(g.c.backend, C.int(n))
		g.threads = n
	}
}

// free releases everything newGraph allocated.
func (g *graph) free() {
	if g == nil || g.c == nil {
		return
	}
	c := g.c
	if c.alloc != nil {
		C.ggml_gallocr_free(c.alloc)
	}
	if c.alloc_logits != nil {
		C.ggml_gallocr_free(c.alloc_logits)
	}
	if g.buf != nil {
		C.ggml_backend_buffer_free(g.buf)
	}
	if g.ctx != nil {
		C.ggml_free(g.ctx)
	}
	if c.backend != nil {
		C.ggml_backend_free(c.backend)
	}
	for _, p := range []unsafe.Pointer{unsafe.Pointer(c.enc), unsafe.Pointer(c.dec), unsafe.Pointer(c.k_self),
		unsafe.Pointer(c.v_self), unsafe.Pointer(c.k_cross), unsafe.Pointer(c.v_cross), c.meta} {
		C.free(p)
	}
	C.free(unsafe.Pointer(c))
	g.c = nil
}

// steps returns the number of encoder steps (encoderStep).
func (g *graph) steps() int { return int(C.rdg_encoder_steps(g.c)) }

// setMel uploads the first 2n frames of one window's log-mel
// ([n_mels][n_frames]), packed as [n_mels][2n].
func (g *graph) setMel(mel []float32, n int) {
	hp := g.c
	frames := 2 * n
	if frames == int(hp.n_frames) {
		C.ggml_backend_tensor_set(g.c.mel, unsafe.Pointer(&mel[0]), 0, C.size_t(4*len(mel)))
		return
	}
	if cap(g.packed) < int(hp.n_mels)*frames {
		g.packed = make([]float32, int(hp.n_mels)*windowFrames)
	}
	p := g.packed[:int(hp.n_mels)*frames]
	for i := 0; i < int(hp.n_mels); i++ {
		copy(p[i*frames:(i+1)*frames], mel[i*windowFrames:i*windowFrames+frames])
	}
	C.ggml_backend_tensor_set(g.c.mel, unsafe.Pointer(&p[0]), 0, C.size_t(4*len(p)))
}

// step runs encoder step i over n positions.
func (g *graph) step(i, n int) error {
	g.c.n_ctx = C.int(n)
	if C.rdg_encoder_step(g.c, C.int(i)) != 0 {
		return errGraph
	}
	return nil
}

// graphPath is the compute path of the ggml graphs (computePath): the
// weights, the encoder's state and the K/V caches on the graph's backend.
type graphPath struct {
	m *Model
	g *graph
	n int // the last encode's positions
}

// encode runs the encoder (computePath.encode): one graph per step (the
// convolutions, each layer, the final norm), with encoderStep between
// them, so that a canceled pass stops within one layer as on the BLAS
// path. The output stays on the backend for cross.
func (p *graphPath) encode(mel []float32, n int) error {
	m, g := p.m, p.g
	p.n = 0
	g.setMel(mel, n)
	for i := 0; i < g.steps(); i++ {
		if err := m.encoderStep(); err != nil {
			return err
		}
		g.setThreads(m.threads)
		if err := g.step(i, n); err != nil {
			return err
		}
	}
	p.n = n
	return nil
}

// cross computes the cross-attention K/V of the last encode's positions on
// the backend (computePath.cross).
func (p *graphPath) cross(st *decState) error {
	p.g.c.n_ctx = C.int(p.n)
	if p.n == 0 || C.rdg_cross(p.g.c) != 0 {
		return errGraph
	}
	st.n, st.ctx = 0, p.n
	return nil
}

// decode feeds tokens at positions st.n.. and writes the hidden states to
// out ([len(tokens)][d]) (computePath.decode); the cross-attention reads
// the first st.ctx rows of the cross K/V.
func (p *graphPath) decode(st *decState, tokens []int, out []float32) error {
	g := p.g
	g.setThreads(p.m.threads)
	g.tok = g.tok[:0]
	for _, t := range tokens {
		g.tok = append(g.tok, int32(t))
	}
	if C.rdg_decode(g.c, (*C.int32_t)(&g.tok[0]), C.int(len(tokens)), C.int(st.n), C.int(st.ctx), (*C.float)(&out[0])) != 0 {
		return errGraph
	}
	st.n += len(tokens)
	return nil
}

// logits writes the logits of ids 0..len(out)-1 for one hidden state
// ([d]) to out, computed on the backend: only they cross back
// (computePath.logits).
func (p *graphPath) logits(hidden, out []float32) error {
	if C.rdg_logits(p.g.c, (*C.float)(&hidden[0]), C.int(len(out)), (*C.float)(&out[0])) != 0 {
		return errGraph
	}
	return nil
}

// output downloads the last encode's output, [n][d] (for the tests).
func (p *graphPath) output() []float32 {
	out := make([]float32, p.n*p.m.hp.NAudioState)
	C.ggml_backend_tensor_get(p.g.c.enc_x, unsafe.Pointer(&out[0]), 0, C.size_t(4*len(out)))
	return out
}

// failGraphAllocs makes the n-th allocation of the graph path from now on
// fail as ggml's would (n 0: none); for the tests of what follows one.
func failGraphAllocs(n int) { C.rdg_fail_countdown = C.int(n) }
