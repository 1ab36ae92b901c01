package whisper

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/replyd/replyd/internal/shareddata"
)

// refDequant is a plain-Go reading of the block formats in the README of
// the conformance data, to check the C kernels against.
func refDequant(typ ggmlType, b []byte, n int) []float32 {
	out := make([]float32, 0, n)
	h := func(o int) float32 { return halfToFloat(binary.LittleEndian.Uint16(b[o:])) }
	switch typ {
	case typeF32:
		for i := 0; i < n; i++ {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case typeF16:
		for i := 0; i < n; i++ {
			out = append(out, h(2*i))
		}
	}
	vals, bsz, _ := typ.BlockSize()
	for blk := 0; vals == 32 && blk < n/32; blk++ {
		o := blk * bsz
		var x [32]float32
		switch typ {
		case typeQ8_0:
			for j := 0; j < 32; j++ {
				x[j] = h(o) * float32(int8(b[o+2+j]))
			}
		case typeQ4_0:
			for j := 0; j < 16; j++ {
				x[j] = h(o) * float32(int(b[o+2+j]&15)-8)
				x[j+16] = h(o) * float32(int(b[o+2+j]>>4)-8)
			}
		case typeQ4_1:
			for j := 0; j < 16; j++ {
				x[j] = h(o)*float32(b[o+4+j]&15) + h(o+2)
				x[j+16] = h(o)*float32(b[o+4+j]>>4) + h(o+2)
			}
		case typeQ5_0, typeQ5_1:
			qo, qh := o+6, binary.LittleEndian.Uint32(b[o+2:])
			if typ == typeQ5_1 {
				qo, qh = o+8, binary.LittleEndian.Uint32(b[o+4:])
			}
			for j := 0; j < 16; j++ {
				lo := int(b[qo+j]&15) | int((qh>>j)&1)<<4
				hi := int(b[qo+j]>>4) | int((qh>>(j+16))&1)<<4
				if typ == typeQ5_0 {
					x[j], x[j+16] = h(o)*float32(lo-16), h(o)*float32(hi-16)
				} else {
					x[j], x[j+16] = h(o)*float32(lo)+h(o+2), h(o)*float32(hi)+h(o+2)
				}
			}
		}
		out = append(out, x[:]...)
	}
	return out
}

// halfToFloat converts an IEEE half exactly.
func halfToFloat(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10)&31, float64(h&0x3ff)
	switch e {
	case 0:
		return sign * float32(math.Ldexp(m, -24))
	case 31:
		if m != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1024+m, e-25))
}

// randomBlocks returns rows·cols values of typ as bytes with finite scales.
func randomBlocks(r *rand.Rand, typ ggmlType, rows, cols int) []byte {
	vals, bsz, _ := typ.BlockSize()
	b := make([]byte, rows*cols/vals*bsz)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	putHalf := func(o int, f float32) { binary.LittleEndian.PutUint16(b[o:], f32ToF16(f)) }
	switch typ {
	case typeF32:
		for i := 0; i < rows*cols; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
	case typeF16:
		for i := 0; i < rows*cols; i++ {
			putHalf(2*i, float32(r.NormFloat64()))
		}
	default:
		for o := 0; o < len(b); o += bsz {
			putHalf(o, float32(r.Float64()*0.1))
			if typ == typeQ4_1 || typ == typeQ5_1 {
				putHalf(o+2, float32(r.NormFloat64()*0.1))
			}
		}
	}
	return b
}

var allTypes = []ggmlType{typeF32, typeF16, typeQ4_0, typeQ4_1, typeQ5_0, typeQ5_1, typeQ8_0}

func TestDequantMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range allTypes {
		n := 32 * 37
		b := randomBlocks(r, typ, 1, n)
		got := make([]float32, n)
		dequant(typ, b, got, n)
		want := refDequant(typ, b, n)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: value %d = %g, want %g", typ, i, got[i], want[i])
			}
		}
	}
}

func TestF16Conversion(t *testing.T) {
	// Every half converts to float32 exactly and back to itself.
	src := make([]byte, 2)
	dst := make([]float32, 1)
	for h := 0; h < 1<<16; h++ {
		binary.LittleEndian.PutUint16(src, uint16(h))
		f16ToF32(src, dst)
		want := halfToFloat(uint16(h))
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(dst[0])) {
				t.Fatalf("%#04x: %g, want NaN", h, dst[0])
			}
			continue
		}
		if dst[0] != want {
			t.Fatalf("%#04x: %g, want %g", h, dst[0], want)
		}
		if back := f32ToF16(want); back != uint16(h) {
			t.Fatalf("%#04x round trip gives %#04x", h, back)
		}
	}
	// Rounding to nearest, ties to even, between neighbouring halves.
	for _, c := range []struct {
		f    float32
		want uint16
	}{{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {1 + 1.5/2048, 0x3c01}, {65520, 0x7c00}, {5.96e-8, 0x0001}, {2.9e-8, 0}} {
		if got := f32ToF16(c.f); got != c.want {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

// TestLinearPaths checks the four product paths (small-batch kernel, the
// same for quantised weights on q8_0-quantised activations, F32 OpenBLAS,
// tiled dequantisation + OpenBLAS) against float64 sums. With quantised
// weights and few rows the sums are over the activations as ggml quantises
// them (refQuantizeQ8), which is what whisper.cpp computes.
func TestLinearPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols := 300, 96
	for _, typ := range allTypes {
		raw := randomBlocks(r, typ, rows, cols)
		vals, bsz, _ := typ.BlockSize()
		w := &weight{typ: typ, rows: rows, cols: cols, rowBytes: cols / vals * bsz}
		full := refDequant(typ, raw, rows*cols)
		if typ == typeF32 {
			w.f32 = full
		} else {
			w.raw = raw
		}
		bias := make([]float32, rows)
		for i := range bias {
			bias[i] = float32(r.NormFloat64())
		}
		for _, n := range []int{1, 3, 8, 9, 40} {
			for _, threads := range []int{1, 3} {
				m := &Model{threads: threads}
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				out := make([]float32, n*rows)
				m.linear(out, x, n, w, bias)
				xr := x
				if typ.Quantized() && n <= 8 {
					xr = refQuantizeQ8(x)
				}
				for tk := 0; tk < n; tk++ {
					for j := 0; j < rows; j++ {
						want := float64(bias[j])
						for k := 0; k < cols; k++ {
							want += float64(full[j*cols+k]) * float64(xr[tk*cols+k])
						}
						if d := math.Abs(float64(out[tk*rows+j]) - want); d > 1e-4*(1+math.Abs(want)) {
							t.Fatalf("%s n=%d threads=%d: out[%d][%d] = %g, want %g", typ, n, threads, tk, j, out[tk*rows+j], want)
						}
					}
				}
			}
		}
	}
}

// refQuantizeQ8 returns x after ggml's quantize_row_q8_0 and back: per
// block of 32, d = max|x|/127 rounded to half precision and q = x·(127/max|x|)
// rounded to the nearest integer, ties to even; the value is d·q.
func refQuantizeQ8(x []float32) []float32 {
	out := make([]float32, len(x))
	for b := 0; b+32 <= len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := halfBits(f32ToF16(amax / 127))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for i, v := range x[b : b+32] {
			out[b+i] = d * float32(math.RoundToEven(float64(v*id)))
		}
	}
	return out
}

func TestSoftmaxGeluAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 3*37)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 20)
	}
	orig := append([]float32(nil), x...)
	valid := []int32{37, 5, 1}
	softmaxRows(x, 3, 37, 37, 0.5, valid)
	for i := 0; i < 3; i++ {
		mx := math.Inf(-1)
		for j := 0; j < int(valid[i]); j++ {
			mx = math.Max(mx, 0.5*float64(orig[i*37+j]))
		}
		var sum float64
		for j := 0; j < int(valid[i]); j++ {
			sum += math.Exp(0.5*float64(orig[i*37+j]) - mx)
		}
		for j := 0; j < 37; j++ {
			want := 0.0
			if j < int(valid[i]) {
				want = math.Exp(0.5*float64(orig[i*37+j])-mx) / sum
			}
			if d := math.Abs(float64(x[i*37+j]) - want); d > 1e-6 {
				t.Fatalf("softmax[%d][%d] = %g, want %g", i, j, x[i*37+j], want)
			}
		}
	}
	g := make([]float32, 1001)
	for i := range g {
		g[i] = float32(i-500) / 50
	}
	in := append([]float32(nil), g...)
	gelu(g)
	for i, v := range in {
		u := math.Sqrt(2/math.Pi) * (float64(v) + 0.044715*math.Pow(float64(v), 3))
		want := 0.5 * float64(v) * (1 + math.Tanh(u))
		if d := math.Abs(float64(g[i]) - want); d > 2e-6*(1+math.Abs(want)) {
			t.Fatalf("gelu(%g) = %g, want %g", v, g[i], want)
		}
	}
	// Multi-head attention: the kernel against a float64 computation.
	const n, L, nh, hd = 3, 50, 4, 16
	d := nh * hd
	rnd := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	q, k, v := rnd(n*d), rnd(L*d), rnd(L*d)
	vl := []int32{50, 20, 1}
	for _, threads := range []int{1, 2} {
		m := &Model{threads: threads}
		out := make([]float32, n*d)
		scores := make([]float32, nh*L)
		m.attendAll(q, k, v, n, L, vl, nh, hd, 0.25, out, scores)
		for tq := 0; tq < n; tq++ {
			for h := 0; h < nh; h++ {
				s := make([]float64, vl[tq])
				mx := math.Inf(-1)
				for j := range s {
					for c := 0; c < hd; c++ {
						s[j] += float64(q[tq*d+h*hd+c]) * float64(k[j*d+h*hd+c])
					}
					s[j] *= 0.25
					mx = math.Max(mx, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for c := 0; c < hd; c++ {
					var want float64
					for j := range s {
						want += s[j] / sum * float64(v[j*d+h*hd+c])
					}
					if dd := math.Abs(float64(out[tq*d+h*hd+c]) - want); dd > 1e-5 {
						t.Fatalf("attention q%d h%d c%d = %g, want %g", tq, h, c, out[tq*d+h*hd+c], want)
					}
				}
			}
		}
	}
}

// TestSlaneyFiltersMatchReferenceModel compares the writer's filter bank
// with the librosa-computed one stored in the shared test models.
func TestSlaneyFiltersMatchReferenceModel(t *testing.T) {
	got := slaneyMelFilters(SampleRate, nFFT, 80)
	g, err := readGGMLFile(filepath.Join(shareddata.Whisper(t), "models", "rand-w64-en-f32.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.filters) != len(got) {
		t.Fatalf("%d filters, want %d", len(g.filters), len(got))
	}
	var worst float64
	for i, want := range g.filters {
		worst = math.Max(worst, math.Abs(float64(got[i]-want)))
	}
	if worst > 1e-6 {
		t.Fatalf("filter bank differs from librosa's by %g", worst)
	}
}

func TestFFTMatchesDFT(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 2, 7, 12, 25, 30, 400} {
		p := newFFTPlan(n)
		x := make([]complex128, n)
		for i := range x {
			x[i] = complex(r.NormFloat64(), r.NormFloat64())
		}
		got := make([]complex128, n)
		p.transform(x, got)
		for k := 0; k < n; k++ {
			var want complex128
			for j := 0; j < n; j++ {
				s, c := math.Sincos(-2 * math.Pi * float64(j*k%n) / float64(n))
				want += x[j] * complex(c, s)
			}
			if d := want - got[k]; math.Hypot(real(d), imag(d)) > 1e-9*float64(n) {
				t.Fatalf("n=%d: X[%d] = %v, want %v", n, k, got[k], want)
			}
		}
	}
}

// TestAttentionF16 checks the decoder's attention kernel on half K and V
// against a float64 computation: heads of 64 values (every Whisper model's)
// and of 32, key counts that are and are not multiples of eight, several
// queries with different lengths, and the rows split over 1 to 3 threads
// (whose parts are then merged), including parts left empty.
func TestAttentionF16(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ nh, hd, L int }{{8, 64, 1500}, {6, 64, 200}, {2, 64, 7}, {2, 32, 50}} {
		const n = 3
		d := c.nh * c.hd
		q := make([]float32, n*d)
		for i := range q {
			q[i] = float32(r.NormFloat64())
		}
		k, v := make([]uint16, c.L*d), make([]uint16, c.L*d)
		for i := range k {
			k[i] = f32ToF16(float32(r.NormFloat64()))
			v[i] = f32ToF16(float32(r.NormFloat64()))
		}
		valid := []int32{int32(c.L), int32(max(c.L-5, 1)), 1}
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		for _, threads := range []int{1, 2, 3} {
			out := make([]float32, n*d)
			scores := make([]float32, c.nh*c.L)
			m := &Model{threads: threads}
			m.attendHalves(q, k, v, n, c.L, valid, c.nh, c.hd, scale, out, scores, nil, nil)
			for tq := 0; tq < n; tq++ {
				for h := 0; h < c.nh; h++ {
					s := make([]float64, valid[tq])
					mx := math.Inf(-1)
					for j := range s {
						for e := 0; e < c.hd; e++ {
							s[j] += float64(q[tq*d+h*c.hd+e]) * float64(halfBits(k[j*d+h*c.hd+e]))
						}
						s[j] *= float64(scale)
						mx = math.Max(mx, s[j])
					}
					var sum float64
					for j := range s {
						s[j] = math.Exp(s[j] - mx)
						sum += s[j]
					}
					for e := 0; e < c.hd; e++ {
						var want float64
						for j := range s {
							want += s[j] / sum * float64(halfBits(v[j*d+h*c.hd+e]))
						}
						if dd := math.Abs(float64(out[tq*d+h*c.hd+e]) - want); dd > 1e-5 {
							t.Fatalf("nh %d hd %d L %d threads %d: q%d h%d c%d = %g, want %g", c.nh, c.hd, c.L, threads, tq, h, e,
								out[tq*d+h*c.hd+e], want)
						}
					}
				}
			}
		}
	}
}

// TestLinearsShareInput checks that products computed together (one
// quantisation of the input, one split over threads) equal, bit for bit,
// the same products computed one by one, for weights of mixed types and
// row counts and every batch path.
func TestLinearsShareInput(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	cols := 64
	var ws []*weight
	for i, typ := range []ggmlType{typeQ8_0, typeQ5_0, typeF16, typeQ8_0} {
		rows := 40 + 7*i
		vals, bsz, _ := typ.BlockSize()
		w := &weight{typ: typ, rows: rows, cols: cols, rowBytes: cols / vals * bsz, raw: randomBlocks(r, typ, rows, cols)}
		ws = append(ws, w)
	}
	for _, n := range []int{1, 5, 12} {
		for _, threads := range []int{1, 2, 3} {
			m := &Model{threads: threads}
			x := make([]float32, n*cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			var together []product
			var apart [][]float32
			for _, w := range ws {
				b := make([]float32, w.rows)
				for i := range b {
					b[i] = float32(r.NormFloat64())
				}
				one := make([]float32, n*w.rows)
				m.linear(one, x, n, w, b)
				apart = append(apart, one)
				together = append(together, product{make([]float32, n*w.rows), w, b})
			}
			m.linears(x, n, together...)
			for i, p := range together {
				if !slices.Equal(p.out, apart[i]) {
					t.Fatalf("n=%d threads=%d: product %d (%s) differs when computed with the others", n, threads, i, p.w.typ)
				}
			}
		}
	}
}

// TestHugePageArenas checks that a loaded model keeps its tensors (the
// decoder's weights and the token embedding among them) in one 2 MB
// aligned arena, and the decoder's K/V caches in another.
func TestHugePageArenas(t *testing.T) {
	m, err := Load(filepath.Join(shareddata.Whisper(t), "models", "rand-w64-en-q8_0.bin"), Options{Threads: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.tensors == nil || uintptr(unsafe.Pointer(&m.tensors.mem[0]))%(2<<20) != 0 {
		t.Fatal("the tensors are not in a 2 MB aligned arena")
	}
	inArena := func(b []byte, a *arena) bool {
		p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&a.mem[0]))
		return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(a.mem))
	}
	ws := []*weight{m.tokEmb}
	for _, b := range m.dec {
		ws = append(ws, b.attn.q, b.attn.k, b.attn.v, b.attn.o, b.cross.q, b.cross.o, b.fc1, b.fc2)
	}
	for i, w := range ws {
		if !inArena(w.raw, &m.tensors.arena) {
			t.Fatalf("weight %d is not in the arena", i)
		}
	}
	st := mustWindow(t, m, make([]float32, m.hp.NMels*windowFrames), 0)
	if m.scr.kv == nil || uintptr(unsafe.Pointer(&m.scr.kv.mem[0]))%(2<<20) != 0 {
		t.Fatal("the K/V caches are not in a 2 MB aligned arena")
	}
	if p := unsafe.Pointer(&st.cv[len(st.cv)-1][0]); !inArena(unsafe.Slice((*byte)(p), 2*len(st.cv[0])), m.scr.kv) {
		t.Fatal("the last cross V is outside the arena")
	}
}
