package whisper

import (
	"math"
	"unsafe"
)

// scratch holds the buffers one transcription reuses; a Model runs one
// transcription at a time, so it keeps one scratch.
type scratch struct {
	tmp    [][]float32   // per-thread row buffers for gemvRows
	tile   []float32     // dequantised weight tile for large products
	xq     []int8        // activations quantised to q8_0 for small-batch products
	xd, xs []float32     // their blocks' scales and scaled sums
	logits []float32     // textLogits' result
	enc    [9][]float32  // encoder activations, reused window after window
	dec    *decState     // the decoder state, reused window after window
	shadow shadowScratch // nextShadow's buffers
	// owned is the C memory behind enc and dec, freed by free. Keeping these
	// large buffers outside the Go heap keeps the collector's heap goal (and
	// so the peak RSS) small.
	owned [][]byte
	kv    *arena // the decoder's K/V caches, in huge pages (huge.go)
}

// floats returns n float32s of C memory owned by s (Go memory when malloc
// fails). Its contents are undefined.
func (s *scratch) floats(n int) []float32 {
	b := cAlloc(int64(n) * 4)
	if b == nil {
		return make([]float32, n)
	}
	s.owned = append(s.owned, b)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// halves is floats for IEEE halves.
func (s *scratch) halves(n int) []uint16 {
	b := cAlloc(int64(n) * 2)
	if b == nil {
		return make([]uint16, n)
	}
	s.owned = append(s.owned, b)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
}

// free releases the C memory of s and forgets its buffers.
func (s *scratch) free() {
	for _, b := range s.owned {
		cFree(b)
	}
	if s.kv != nil {
		hugeFree(s.kv.mem)
	}
	*s = scratch{}
}

// tileFloats is the size of the dequantised weight tile, in floats.
const tileFloats = 1 << 17

// smallBatch is the most rows of x that go through the compact weights
// directly; longer batches go to OpenBLAS.
const smallBatch = 8

// product is one linear layer applied to a shared input: out[t][r] =
// x[t] · w[r] + b[r] (b may be nil).
type product struct {
	out []float32
	w   *weight
	b   []float32
}

// linear computes out[t][r] = x[t] · w[r] + b[r] for t < n (b may be nil).
// Few rows of x go through the compact weights directly; many rows go to
// OpenBLAS, with non-F32 weights dequantised a tile of rows at a time.
func (m *Model) linear(out, x []float32, n int, w *weight, b []float32) {
	m.linears(x, n, product{out, w, b})
}

// linears computes several products of the same n input rows x ([n][cols],
// every w has cols columns). With few rows they share one quantisation of x
// and one split over the threads, so that the threads meet once for all of
// them.
func (m *Model) linears(x []float32, n int, ps ...product) {
	if n > smallBatch {
		for _, p := range ps {
			m.linearBatch(p.out, x, n, p.w)
		}
	} else {
		cols := ps[0].w.cols
		var xq []int8
		var xd, xs []float32
		var tmps [][]float32
		for _, p := range ps {
			if p.w.typ.Quantized() && xq == nil {
				// As ggml does: the activations are quantised to q8_0 once, and
				// each block product is an integer dot product.
				xq, xd, xs = m.q8Buffers(n * cols)
				quantizeQ8(x[:n*cols], xq, xd, xs)
			} else if !p.w.typ.Quantized() && tmps == nil {
				tmps = m.tmpBuffers(cols)
			}
		}
		chunks := m.threads
		parallel(m.threads, chunks, func(c0, c1 int) {
			for c := c0; c < c1; c++ {
				for _, p := range ps {
					rows := p.w.rows
					r0, r1 := c*rows/chunks, (c+1)*rows/chunks
					if p.w.typ.Quantized() {
						gemvRowsQ8(p.w, xq, xd, xs, n, p.out, rows, r0, r1)
					} else {
						gemvRows(p.w, x, n, p.out, rows, r0, r1, tmps[c])
					}
				}
			}
		})
	}
	for _, p := range ps {
		if p.b == nil {
			continue
		}
		rows := p.w.rows
		for t := 0; t < n; t++ {
			addInto(p.out[t*rows:(t+1)*rows], p.b)
		}
	}
}

// linearBatch computes out = x · wᵀ for many rows of x through OpenBLAS.
func (m *Model) linearBatch(out, x []float32, n int, w *weight) {
	rows, cols := w.rows, w.cols
	if w.typ == typeF32 {
		sgemmNT(n, rows, cols, x, cols, w.f32, cols, out, rows, false)
		return
	}
	tr := max(tileFloats/cols, 1)
	tile := m.tileBuffer(tr * cols)
	for r0 := 0; r0 < rows; r0 += tr {
		r1 := min(r0+tr, rows)
		parallel(m.threads, r1-r0, func(a, b int) {
			dequant(w.typ, w.raw[(r0+a)*w.rowBytes:(r0+b)*w.rowBytes], tile[a*cols:], (b-a)*cols)
		})
		sgemmNT(n, r1-r0, cols, x, cols, tile, cols, out[r0:], rows, false)
	}
}

func (m *Model) tmpBuffers(cols int) [][]float32 {
	if len(m.scr.tmp) != m.threads || len(m.scr.tmp[0]) < cols {
		m.scr.tmp = m.scr.tmp[:0]
		for i := 0; i < m.threads; i++ {
			m.scr.tmp = append(m.scr.tmp, make([]float32, cols))
		}
	}
	return m.scr.tmp
}

// q8Buffers returns scratch for n activations quantised by quantizeQ8:
// their int8 values, and the scales and sums of their n/32 blocks.
func (m *Model) q8Buffers(n int) (q []int8, d, s []float32) {
	sc := &m.scr
	if len(sc.xq) < n {
		sc.xq = make([]int8, n)
		sc.xd, sc.xs = make([]float32, n/32), make([]float32, n/32)
	}
	return sc.xq[:n], sc.xd[:n/32], sc.xs[:n/32]
}

func (m *Model) tileBuffer(n int) []float32 {
	if len(m.scr.tile) < n {
		m.scr.tile = make([]float32, n)
	}
	return m.scr.tile[:n]
}

// layerNormInto writes LayerNorm(x) (eps 1e-5) of n rows of width d to out.
func layerNormInto(out, x []float32, n, d int, ln layerNorm) {
	for t := 0; t < n; t++ {
		row := x[t*d : (t+1)*d]
		o := out[t*d : (t+1)*d]
		var mean float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(d)
		var vr float64
		for _, v := range row {
			dv := float64(v) - mean
			vr += dv * dv
		}
		vr /= float64(d)
		inv := 1 / math.Sqrt(vr+1e-5)
		for i, v := range row {
			o[i] = float32((float64(v)-mean)*inv)*ln.w[i] + ln.b[i]
		}
	}
}

func addInto(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// convOut finishes a convolution from its unfolded input col ([rows][k]):
// out ([rows][d]) = GELU(col · wᵀ + b) for the kernel w ([d][k]).
func convOut(out, col []float32, rows, d, k int, w, b []float32) {
	sgemmNT(rows, d, k, col, k, w, k, out, d, false)
	for t := 0; t < rows; t++ {
		addInto(out[t*d:(t+1)*d], b)
	}
	gelu(out)
}

// encBuf returns encoder scratch buffer i with n floats (contents stale).
// Each buffer is allocated once, at its size for the model's full window
// (encBufSizes), so that a shorter window never grows it.
func (m *Model) encBuf(i, n int) []float32 {
	if m.scr.enc[i] == nil {
		m.scr.enc[i] = m.scr.floats(m.encBufSizes()[i])
	}
	return m.scr.enc[i][:n]
}

// encBufSizes are the sizes of the encoder's scratch buffers at the
// model's n_audio_ctx: the convolutions' unfolded input, conv1's output and
// the attention scores, the running activations and the MLP's.
func (m *Model) encBufSizes() [9]int {
	hp := m.hp
	T, d, nm := hp.NAudioCtx, hp.NAudioState, hp.NMels
	td := T * d
	return [9]int{max(2*T*nm*3, td*3), max(2*td, T*T), td, td, td, td, td, td, 4 * td}
}

// blasPath is the compute path of replyd's own kernels and OpenBLAS
// (computePath): the weights in host memory, the activations and K/V
// caches in the Model's scratch.
type blasPath struct {
	m   *Model
	out []float32 // the last encode's output, [n][d]
	n   int       // its positions
}

// step is encoderStep, then OpenBLAS runs what the next products run.
func (p *blasPath) step() error {
	if err := p.m.encoderStep(); err != nil {
		return err
	}
	p.m.syncBLAS()
	return nil
}

// encode runs the encoder on the first 2T frames of one window's log-mel
// input ([n_mels][3000]), T = n positions (computePath.encode). As
// whisper.cpp does with audio_ctx: both convolutions pad with zeros at the
// edges of those 2T frames, the positions get the positional embedding's
// rows 0..T-1, and the self-attention runs over the T positions.
func (p *blasPath) encode(mel []float32, T int) error {
	m := p.m
	if err := p.step(); err != nil {
		return err
	}
	hp := m.hp
	d, nm := hp.NAudioState, hp.NMels
	T1 := 2 * T // frames after conv1
	// conv1 (kernel 3, padding 1) as im2col · weightᵀ.
	col := m.encBuf(0, max(T1*nm*3, T*d*3))
	parallel(m.threads, T1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			c := col[t*nm*3 : (t+1)*nm*3]
			for i := 0; i < nm; i++ {
				for k := 0; k < 3; k++ {
					s := t + k - 1
					var v float32
					if s >= 0 && s < T1 && s < windowFrames {
						v = mel[i*windowFrames+s]
					}
					c[i*3+k] = v
				}
			}
		}
	})
	h1 := m.encBuf(1, T1*d)
	convOut(h1, col, T1, d, nm*3, m.conv1w, m.conv1b)
	// conv2 (kernel 3, padding 1, stride 2).
	col = col[:T*d*3]
	parallel(m.threads, T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			c := col[t*d*3 : (t+1)*d*3]
			for k := 0; k < 3; k++ {
				s := 2*t + k - 1
				for i := 0; i < d; i++ {
					var v float32
					if s >= 0 && s < T1 {
						v = h1[s*d+i]
					}
					c[i*3+k] = v
				}
			}
		}
	})
	x := m.encBuf(2, T*d)
	if err := p.step(); err != nil {
		return err
	}
	convOut(x, col, T, d, d*3, m.conv2w, m.conv2b)
	addInto(x, m.encPos[:T*d])

	h := m.encBuf(3, T*d)
	q := m.encBuf(4, T*d)
	k := m.encBuf(5, T*d)
	v := m.encBuf(6, T*d)
	a := m.encBuf(7, T*d)
	ff := m.encBuf(8, T*4*d)
	scores := m.encBuf(1, T*T) // h1 is no longer needed
	nh := hp.NAudioHead
	hd := d / nh
	scale := float32(1 / math.Sqrt(float64(hd)))
	for l := range m.enc {
		if l > 0 {
			if err := p.step(); err != nil {
				return err
			}
		}
		b := &m.enc[l]
		layerNormInto(h, x, T, d, b.attnLn)
		m.linear(q, h, T, b.attn.q, b.attn.qb)
		m.linear(k, h, T, b.attn.k, nil)
		m.linear(v, h, T, b.attn.v, b.attn.vb)
		if err := p.step(); err != nil {
			return err
		}
		for hh := 0; hh < nh; hh++ {
			o := hh * hd
			sgemmNT(T, T, hd, q[o:], d, k[o:], d, scores, T, false)
			parallel(m.threads, T, func(lo, hi int) {
				softmaxRows(scores[lo*T:], hi-lo, T, T, scale, nil)
			})
			sgemmNN(T, hd, T, scores, T, v[o:], d, a[o:], d)
		}
		m.linear(h, a, T, b.attn.o, b.attn.ob)
		addInto(x, h)
		layerNormInto(h, x, T, d, b.mlpLn)
		if err := p.step(); err != nil {
			return err
		}
		m.linear(ff, h, T, b.fc1, b.fc1b)
		parallel(m.threads, T, func(lo, hi int) { gelu(ff[lo*4*d : hi*4*d]) })
		m.linear(h, ff, T, b.fc2, b.fc2b)
		addInto(x, h)
	}
	layerNormInto(x, x, T, d, m.encLn)
	p.out, p.n = x, T
	return nil
}

// cross computes the cross-attention K/V of the last encode's p.n
// positions into st (computePath.cross). The caches are allocated once,
// at the model's n_audio_ctx rows.
func (p *blasPath) cross(st *decState) error {
	m := p.m
	hp := m.hp
	d, T := hp.NTextState, p.n
	if st.ck == nil {
		// Every step reads the cross K/V and the filled part of the cache:
		// one arena of huge pages for all of them, where it can be had.
		cross, self := int64(hp.NAudioCtx*d), int64(hp.NTextCtx*d)
		m.scr.kv = newArena(int64(len(m.dec)) * 2 * arenaSize(2*cross, 2*self))
		halves := func(n int64) []uint16 {
			if m.scr.kv == nil {
				return m.scr.halves(int(n))
			}
			return unsafe.Slice((*uint16)(unsafe.Pointer(&m.scr.kv.take(2 * n)[0])), n)
		}
		for range m.dec {
			st.ck = append(st.ck, halves(cross))
			st.cv = append(st.cv, halves(cross))
			st.k = append(st.k, halves(self))
			st.v = append(st.v, halves(self))
		}
	}
	st.n, st.ctx = 0, T
	tmp := m.encBuf(3, T*d) // the encoder's h, free once it has finished
	for l := range m.dec {
		b := &m.dec[l]
		m.linear(tmp, p.out, T, b.cross.k, nil)
		toF16(tmp, st.ck[l][:T*d])
		m.linear(tmp, p.out, T, b.cross.v, b.cross.vb)
		toF16(tmp, st.cv[l][:T*d])
	}
	return nil
}

// decode feeds tokens at positions st.n.. (computePath.decode); the
// cross-attention reads the first st.ctx rows of the cross K/V.
func (p *blasPath) decode(st *decState, tokens []int, x []float32) error {
	m := p.m
	hp := m.hp
	d, T := hp.NTextState, st.ctx
	n := len(tokens)
	for i, tk := range tokens {
		m.tokEmb.row(tk, x[i*d:(i+1)*d])
		addInto(x[i*d:(i+1)*d], m.decPos[(st.n+i)*d:(st.n+i+1)*d])
	}
	h := make([]float32, n*d)
	q := make([]float32, n*d)
	a := make([]float32, n*d)
	k, v := make([]float32, n*d), make([]float32, n*d) // the new rows of the self-attention cache
	ff := make([]float32, n*4*d)
	nh := hp.NTextHead
	hd := d / nh
	scale := float32(1 / math.Sqrt(float64(hd)))
	kv := st.n + n
	scores := make([]float32, max(n, nh)*max(T, kv))
	valid := make([]int32, n)
	crossValid := make([]int32, n)
	for i := range valid {
		valid[i] = int32(st.n + i + 1)
		crossValid[i] = int32(T)
	}
	var k32, v32 []float32 // K/V as float32, for long batches
	if n > 16 {
		k32, v32 = make([]float32, max(T, kv)*d), make([]float32, max(T, kv)*d)
	}
	for l := range m.dec {
		b := &m.dec[l]
		layerNormInto(h, x, n, d, b.attnLn)
		m.linears(h, n, product{q, b.attn.q, b.attn.qb}, product{k, b.attn.k, nil}, product{v, b.attn.v, b.attn.vb})
		toF16(k, st.k[l][st.n*d:kv*d])
		toF16(v, st.v[l][st.n*d:kv*d])
		m.attendHalves(q, st.k[l], st.v[l], n, kv, valid, nh, hd, scale, a, scores, k32, v32)
		m.linear(h, a, n, b.attn.o, b.attn.ob)
		addInto(x, h)

		layerNormInto(h, x, n, d, b.crossLn)
		m.linear(q, h, n, b.cross.q, b.cross.qb)
		m.attendHalves(q, st.ck[l], st.cv[l], n, T, crossValid, nh, hd, scale, a, scores, k32, v32)
		m.linear(h, a, n, b.cross.o, b.cross.ob)
		addInto(x, h)

		layerNormInto(h, x, n, d, b.mlpLn)
		m.linear(ff, h, n, b.fc1, b.fc1b)
		gelu(ff)
		m.linear(h, ff, n, b.fc2, b.fc2b)
		addInto(x, h)
	}
	st.n += n
	layerNormInto(x, x, n, d, m.decLn)
	return nil
}

// logits computes the logits of ids 0..len(out)-1 from the token
// embedding's first rows (computePath.logits).
func (p *blasPath) logits(hidden, out []float32) error {
	w := *p.m.tokEmb
	w.rows = len(out)
	p.m.linear(out, hidden, 1, &w, nil)
	return nil
}

// attendHalves is attendAll over the first L rows of K/V stored as IEEE
// halves. Few queries read the halves directly; many go through attendAll
// on float32 copies in k32 and v32 (L·d floats each).
func (m *Model) attendHalves(q []float32, k, v []uint16, n, L int, valid []int32, nh, hd int, scale float32, out, scores, k32, v32 []float32) {
	if n <= 16 {
		m.attendRows(q, unsafe.Pointer(&k[0]), unsafe.Pointer(&v[0]), 2, n, L, valid, nh, hd, scale, out, scores)
		return
	}
	d := nh * hd
	fromF16(k[:L*d], k32[:L*d])
	fromF16(v[:L*d], v32[:L*d])
	m.attendAll(q, k32, v32, n, L, valid, nh, hd, scale, out, scores)
}

// attendAll computes multi-head attention of the n queries in q ([n][d])
// over the first L rows of k and v ([rows][d]); query i sees valid[i] rows.
// Few queries go through attendRows; many go through OpenBLAS head by head.
// scores holds at least max(n, nh)·L floats.
func (m *Model) attendAll(q, k, v []float32, n, L int, valid []int32, nh, hd int, scale float32, out, scores []float32) {
	d := nh * hd
	if n <= 16 {
		m.attendRows(q, unsafe.Pointer(&k[0]), unsafe.Pointer(&v[0]), 4, n, L, valid, nh, hd, scale, out, scores)
		return
	}
	for hh := 0; hh < nh; hh++ {
		o := hh * hd
		sgemmNT(n, L, hd, q[o:], d, k[o:], d, scores, L, false)
		softmaxRows(scores, n, L, L, scale, valid)
		sgemmNN(n, hd, L, scores, L, v[o:], d, out[o:], d)
	}
}

// minRowsPerPart is the fewest K/V rows worth a thread of their own in
// attendRows.
const minRowsPerPart = 64

// attendRows computes the attention of n queries over K and V (rows of
// nh·hd elements of es bytes) with a kernel that reads them once for all
// heads, row by row. The threads split the rows, each taking a softmax over
// its own, and the parts are merged (see rd_attention_part).
func (m *Model) attendRows(q []float32, k, v unsafe.Pointer, es, n, L int, valid []int32, nh, hd int, scale float32, out, scores []float32) {
	d := nh * hd
	parts := 1
	if m.threads > 1 && L >= minRowsPerPart*m.threads {
		parts = m.threads
	}
	mx, l := make([]float32, n*parts*nh), make([]float32, n*parts*nh)
	o := make([]float32, n*parts*d)
	parallel(m.threads, parts, func(p0, p1 int) {
		for p := p0; p < p1; p++ {
			attendPart(q, k, v, es, n, valid, d, hd, p, parts, scale, scores, L, mx, l, o)
		}
	})
	attendMerge(n, parts, d, hd, mx, l, o, out)
}
