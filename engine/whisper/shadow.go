package whisper

/*
#include "kernels.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// Greedy decoding needs, at every step, only the highest of the ~50k text
// logits, the runner-up and the log-softmax at the winner. Computing all of
// them from an F16 token embedding reads n_vocab·d·2 bytes per token (40 MB
// for tiny.en), more than the rest of the decoder step together. A shadow
// is an int8 copy of the embedding, half the bytes of F16, with per row the
// largest rounding error and the L1 norm of the copy. From these, each
// approximate logit a comes with a bound b such that the logit the F16 path
// would compute lies in [a-b, a+b]. Only the rows whose interval reaches the
// second-highest lower end can hold the best or the runner-up, and only
// those are computed from the F16 rows, with the same kernel as the full
// product. So the picked token, its logit and the runner-up are bit for bit
// those of the full product. The log-softmax uses those exact logits and
// the approximate ones for the rest, whose errors are far below the bound
// in practice: it was off by up to 0.002 in one step of the tests. Windows
// where that matters, those whose no-speech probability lets the no-speech
// rule fire, are decoded with the full product (greedyWindow).

// shadow is the int8 copy of a token embedding (see above).
type shadow struct {
	q              []byte    // rows·cols int8 values, C memory
	scale, err, l1 []float32 // per row
	rows, cols     int
}

// shadowScratch holds the per-step buffers of nextShadow.
type shadowScratch struct {
	xq     []int16
	a, b   []float32
	cand   []int32
	exact  []float32
	tmp    []float32
	counts shadowCounts
}

// shadowCounts counts how steps were decided, for tests and benchmarks.
type shadowCounts struct {
	steps, candidates, fallbacks int
}

// buildShadow makes the int8 copy of the token embedding when its rows are
// F16 or F32 (quantised embeddings are already compact). It leaves
// m.shadow nil when the copy cannot be made.
func (m *Model) buildShadow() {
	w := m.tokEmb
	if w == nil || (w.typ != typeF16 && w.typ != typeF32) || w.rows == 0 || w.cols == 0 || w.cols > 4096 {
		return
	}
	// Every step reads all of it: in huge pages (huge.go).
	q := hugeAlloc(int64(w.rows) * int64(w.cols))
	if q == nil {
		return
	}
	sh := &shadow{q: q, rows: w.rows, cols: w.cols,
		scale: make([]float32, w.rows), err: make([]float32, w.rows), l1: make([]float32, w.rows)}
	var raw unsafe.Pointer
	if w.typ == typeF32 {
		raw = unsafe.Pointer(&w.f32[0])
	} else {
		raw = unsafe.Pointer(&w.raw[0])
	}
	ok := make([]bool, m.threads)
	parallel(m.threads, m.threads, func(c0, c1 int) {
		tmp := make([]float32, w.cols)
		for c := c0; c < c1; c++ {
			r0, r1 := c*w.rows/m.threads, (c+1)*w.rows/m.threads
			ok[c] = C.rd_shadow_build(C.int(w.typ), (*C.uint8_t)(raw), C.long(w.rowBytes), C.int(w.cols), C.int(r0), C.int(r1),
				(*C.int8_t)(unsafe.Pointer(&q[0])), (*C.float)(&sh.scale[0]), (*C.float)(&sh.err[0]), (*C.float)(&sh.l1[0]),
				(*C.float)(&tmp[0])) != 0
		}
	})
	for _, v := range ok {
		if !v {
			hugeFree(q)
			m.log.Warn("whisper token embedding holds values that are not finite; decoding reads it in full")
			return
		}
	}
	m.shadow = sh
}

// bytes returns the memory the shadow occupies.
func (sh *shadow) bytes() int64 {
	if sh == nil {
		return 0
	}
	return int64(len(sh.q)) + 12*int64(sh.rows)
}

// free releases the shadow's C memory.
func (sh *shadow) free() {
	if sh != nil {
		hugeFree(sh.q)
		sh.q = nil
	}
}

// pick is greedy decoding's choice at one step.
type pick struct {
	id      int     // the allowed id with the highest logit, the lower id on ties
	logit   float32 // its logit
	runner  float32 // the highest logit of the other allowed ids
	logprob float64 // log-softmax over the allowed ids at id
}

// next picks the next token from one (layer-normed) hidden state. The
// allowed ids are 0..<|endoftext|> less those in banned. With exactLogprob
// the log-probability comes from the full product too; otherwise it may be
// off by a few thousandths (see above).
func (m *Model) next(hidden []float32, banned []int, exactLogprob bool) (pick, error) {
	if m.shadow != nil && !exactLogprob {
		if p, ok := m.nextShadow(hidden, banned); ok {
			return p, nil
		}
	}
	return m.nextExact(hidden, banned)
}

// nextExact is next from the full product of the token embedding.
func (m *Model) nextExact(hidden []float32, banned []int) (pick, error) {
	lg, err := m.textLogits(hidden)
	if err != nil {
		return pick{}, err
	}
	for _, id := range banned {
		lg[id] = float32(math.Inf(-1))
	}
	return pickFrom(lg, nil), nil
}

// pickFrom applies greedy decoding's rule to the logits lg of ids
// 0..len(lg)-1, looking only at the ids in only when only is not nil (they
// must be ascending and hold every id that can be the best or the
// runner-up). Every lg[i] must be at most the best logit.
func pickFrom(lg []float32, only []int32) pick {
	var p pick
	if only == nil {
		var best C.int
		var top, runner C.float
		C.rd_top2((*C.float)(&lg[0]), C.int(len(lg)), &best, &top, &runner)
		p = pick{id: int(best), logit: float32(top), runner: float32(runner)}
	} else {
		p = pick{id: int(only[0]), logit: lg[only[0]], runner: float32(math.Inf(-1))}
		for _, id := range only[1:] {
			if v := lg[id]; v > p.logit {
				p.runner = p.logit
				p.id, p.logit = int(id), v
			} else if v > p.runner {
				p.runner = v
			}
		}
	}
	p.logprob = -math.Log(sumExp(lg, p.logit))
	return p
}

// shadowLogits computes the approximate logits a and their bounds b of ids
// 0..<|endoftext|> from the shadow, in scratch buffers. It reports false
// when the hidden state is zero or not finite.
func (m *Model) shadowLogits(hidden []float32) (a, b []float32, ok bool) {
	sh := m.shadow
	n := m.tok.eot + 1
	x := hidden[:sh.cols]
	sc := &m.scr.shadow
	if len(sc.xq) != sh.cols {
		sc.xq = make([]int16, sh.cols)
		sc.tmp = make([]float32, sh.cols)
	}
	if len(sc.a) < n {
		sc.a, sc.b = make([]float32, n), make([]float32, n)
	}
	// x ≈ sx·xq with xq in int16.
	var mx float32
	var xn1 float64
	for _, v := range x {
		a := float32(math.Abs(float64(v)))
		mx = max(mx, a)
		xn1 += float64(a)
	}
	if math.IsNaN(float64(mx)) || math.IsInf(float64(mx), 0) || mx == 0 {
		return nil, nil, false
	}
	sx := mx / 32767
	var ex float64
	for i, v := range x {
		q := math.RoundToEven(float64(v) / float64(sx))
		q = max(-32767, min(32767, q))
		sc.xq[i] = int16(q)
		ex = max(ex, math.Abs(float64(v)-float64(sx)*q))
	}
	a, b = sc.a[:n], sc.b[:n]
	parallel(m.threads, m.threads, func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			r0, r1 := c*n/m.threads, (c+1)*n/m.threads
			if r0 < r1 {
				C.rd_shadow_gemv((*C.int8_t)(unsafe.Pointer(&sh.q[0])), C.int(sh.cols), (*C.int16_t)(&sc.xq[0]), C.float(sx),
					C.float(xn1*(1+1e-6)), C.float(ex*(1+1e-6)), (*C.float)(&sh.scale[0]), (*C.float)(&sh.err[0]),
					(*C.float)(&sh.l1[0]), C.int(r0), C.int(r1), (*C.float)(&a[0]), (*C.float)(&b[0]))
			}
		}
	})
	return a, b, true
}

// nextShadow is next through the shadow. It reports false when the
// hidden state is zero or not finite, or when so many rows are close to the
// best that the full product is cheaper.
func (m *Model) nextShadow(hidden []float32, banned []int) (pick, bool) {
	sc := &m.scr.shadow
	sc.counts.steps++
	n := m.tok.eot + 1
	x := hidden[:m.shadow.cols]
	a, b, ok := m.shadowLogits(x)
	if !ok {
		sc.counts.fallbacks++
		return pick{}, false
	}
	ninf := float32(math.Inf(-1))
	for _, id := range banned {
		a[id], b[id] = ninf, 0
	}
	// The rows that can hold the best or the runner-up: those whose upper end
	// reaches the second-highest lower end. At least two rows reach it, so
	// the best and the runner-up both do.
	maxc := n / 8
	if maxc == 0 {
		sc.counts.fallbacks++
		return pick{}, false
	}
	if cap(sc.cand) < maxc {
		sc.cand = make([]int32, maxc)
	}
	nc := shadowCandidates(a, b, sc.cand[:maxc])
	if nc == 0 || nc > maxc {
		sc.counts.fallbacks++
		return pick{}, false
	}
	cand := sc.cand[:nc]
	sc.counts.candidates += len(cand)
	if cap(sc.exact) < len(cand) {
		sc.exact = make([]float32, len(cand), 2*len(cand))
	}
	exact := sc.exact[:len(cand)]
	w := m.tokEmb
	var raw unsafe.Pointer
	if w.typ == typeF32 {
		raw = unsafe.Pointer(&w.f32[0])
	} else {
		raw = unsafe.Pointer(&w.raw[0])
	}
	C.rd_gemv_idx(C.int(w.typ), (*C.uint8_t)(raw), C.long(w.rowBytes), (*C.float)(&x[0]), C.int(w.cols),
		(*C.int32_t)(unsafe.Pointer(&cand[0])), C.int(len(cand)), (*C.float)(&exact[0]), (*C.float)(&sc.tmp[0]))
	for k, id := range cand {
		a[id] = exact[k]
	}
	return pickFrom(a, cand), true
}

// shadowCandidates writes to cand, ascending, the ids whose interval
// [a-b, a+b] reaches the second-highest lower end a-b, less those with
// a = -Inf, and returns their count, or len(cand)+1 when more do
// (len(cand) ≥ 1).
func shadowCandidates(a, b []float32, cand []int32) int {
	return int(C.rd_shadow_candidates((*C.float)(&a[0]), (*C.float)(&b[0]), C.int(len(a)),
		(*C.int32_t)(unsafe.Pointer(&cand[0])), C.int(len(cand))))
}
