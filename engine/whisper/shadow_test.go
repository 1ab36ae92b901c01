package whisper

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// shadowModel returns a Model holding only a token embedding of rows×cols
// values of type typ (F16 or F32) with <|endoftext|> at rows-1, and its
// shadow. Row scales vary over three decades, some rows have one large
// element, and rows dup[i] copy row dup[i]-1... so that exact ties occur.
func shadowModel(t testing.TB, typ ggmlType, rows, cols, threads int, seed uint64) *Model {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	vals := make([]float32, rows*cols)
	for i := 0; i < rows; i++ {
		scale := 0.25 * math.Pow(10, r.Float64()*3-2)
		row := vals[i*cols : (i+1)*cols]
		for j := range row {
			row[j] = float32(r.NormFloat64() * scale)
		}
		if i%97 == 5 {
			row[r.IntN(cols)] = float32(50 * scale)
		}
	}
	// Exact duplicates: rows 10 and 11, and 200 and rows-2, above the other
	// scales so that a hidden state along them makes them the best.
	for _, i := range []int{10, 200} {
		for j := range cols {
			vals[i*cols+j] = float32(20 * r.NormFloat64())
		}
	}
	copy(vals[11*cols:12*cols], vals[10*cols:11*cols])
	copy(vals[(rows-2)*cols:(rows-1)*cols], vals[200*cols:201*cols])
	w := &weight{typ: typ, rows: rows, cols: cols}
	switch typ {
	case typeF32:
		w.rowBytes, w.f32 = 4*cols, vals
	case typeF16:
		w.rowBytes, w.raw = 2*cols, make([]byte, 2*rows*cols)
		for i, v := range vals {
			h := f32ToF16(v)
			w.raw[2*i], w.raw[2*i+1] = byte(h), byte(h>>8)
		}
	}
	m := &Model{threads: threads, log: quiet, tok: specialTokens{eot: rows - 1, space: -1}, tokEmb: w}
	m.comp = &blasPath{m: m}
	m.buildShadow()
	if m.shadow == nil {
		t.Fatal("no shadow built")
	}
	t.Cleanup(m.shadow.free)
	return m
}

// hiddenVectors returns test inputs: layer-norm-like vectors, vectors with
// outliers, tiny and huge scales, sparse ones, and copies of embedding
// rows (which make those rows, and their duplicates, the best).
func hiddenVectors(m *Model, r *rand.Rand, n int) [][]float32 {
	cols := m.tokEmb.cols
	var out [][]float32
	row := make([]float32, cols)
	for k := 0; k < n; k++ {
		x := make([]float32, cols)
		for i := range x {
			x[i] = float32(r.NormFloat64()*(1+0.3*r.NormFloat64()) + 0.1)
		}
		switch k % 6 {
		case 1:
			x[r.IntN(cols)] *= 40
		case 2:
			for i := range x {
				x[i] *= 1e-4
			}
		case 3:
			for i := range x {
				x[i] *= 300
			}
		case 4:
			for i := range x {
				if i%7 != 0 {
					x[i] = 0
				}
			}
		case 5:
			id := []int{10, 11, 200, m.tokEmb.rows - 2, r.IntN(m.tokEmb.rows)}[k%5]
			m.tokEmb.row(id, row)
			for i := range x {
				x[i] = row[i] * 8
			}
		}
		out = append(out, x)
	}
	return out
}

// TestShadowPicksExactly checks that greedy decoding through the int8 copy
// picks the same token with the same logit and runner-up, bit for bit, as
// the full product, and a log-probability within 0.01, on F16 and F32
// embeddings, one and two threads, with and without banned ids.
func TestShadowPicksExactly(t *testing.T) {
	for _, tc := range []struct {
		typ        ggmlType
		rows, cols int
		threads    int
	}{
		{typeF16, 6000, 384, 1},
		{typeF16, 5001, 64, 2},
		{typeF32, 3000, 96, 2},
		{typeF16, 4000, 1280, 1},
		{typeF16, 2000, 40, 1}, // not a multiple of 32: the kernels' scalar paths
	} {
		name := tc.typ.String() + "/" + strconv.Itoa(tc.rows) + "x" + strconv.Itoa(tc.cols) + "/threads=" + strconv.Itoa(tc.threads)
		t.Run(name, func(t *testing.T) {
			m := shadowModel(t, tc.typ, tc.rows, tc.cols, tc.threads, uint64(tc.cols))
			r := rand.New(rand.NewPCG(uint64(tc.rows), 3))
			sh := m.shadow
			m.shadow = nil
			for k, x := range hiddenVectors(m, r, 60) {
				var banned []int
				if k%4 == 3 {
					banned = []int{m.tok.eot, 10, 200}
				}
				m.shadow = nil
				want := mustNext(t, m, x, banned, true)
				m.shadow = sh
				got, ok := m.nextShadow(x, banned)
				if !ok {
					t.Fatalf("vector %d: the shadow gave up", k)
				}
				if got.id != want.id || math.Float32bits(got.logit) != math.Float32bits(want.logit) ||
					math.Float32bits(got.runner) != math.Float32bits(want.runner) {
					t.Fatalf("vector %d: shadow picked %+v, full product %+v", k, got, want)
				}
				if d := math.Abs(got.logprob - want.logprob); d > 0.01 {
					t.Fatalf("vector %d: logprob %v, full product %v", k, got.logprob, want.logprob)
				}
				if banned == nil && k%6 == 5 && (k%5 == 0 || k%5 == 2) && (got.id != []int{10, 0, 200}[k%5] || got.logit != got.runner) {
					t.Fatalf("vector %d: a duplicated row is best but the runner-up differs: %+v", k, got)
				}
			}
			c := m.scr.shadow.counts
			if c.fallbacks != 0 || float64(c.candidates)/float64(c.steps) > 0.01*float64(tc.rows) {
				t.Fatalf("the bounds prune too little: %+v over %d rows", c, tc.rows)
			}
			t.Logf("%.1f exact rows per step of %d", float64(c.candidates)/float64(c.steps), tc.rows)
		})
	}
}

// TestShadowBounds checks the invariant the pruning rests on: every row's
// approximate logit lies within its bound of the full product's logit.
func TestShadowBounds(t *testing.T) {
	for _, tc := range []struct {
		typ  ggmlType
		cols int
	}{{typeF16, 384}, {typeF32, 384}, {typeF16, 72}} {
		typ := tc.typ
		m := shadowModel(t, typ, 3000, tc.cols, 1, 5)
		r := rand.New(rand.NewPCG(8, 8))
		sh := m.shadow
		for k, x := range hiddenVectors(m, r, 30) {
			m.shadow = nil
			exact := append([]float32(nil), mustTextLogits(t, m, x)...)
			m.shadow = sh
			if _, ok := m.nextShadow(x, nil); !ok {
				t.Fatalf("%v vector %d: the shadow gave up", typ, k)
			}
			// nextShadow replaced the candidates' approximations by exact
			// values; the others are still approximations.
			a, b := m.scr.shadow.a, m.scr.shadow.b
			for i, e := range exact {
				if math.Abs(float64(a[i])-float64(e)) > float64(b[i]) {
					t.Fatalf("%v vector %d row %d: approximation %v, exact %v, bound %v", typ, k, i, a[i], e, b[i])
				}
			}
		}
	}
}

// TestShadowBoundIsTight builds rows whose every value sits just below the
// midpoint between two int8 steps, and a hidden state of ±1 along the
// rounding errors: the approximation is then off by nearly the whole bound,
// beyond the bound's slack for float rounding (about 2% here), so a bound
// too small by more than that would show.
func TestShadowBoundIsTight(t *testing.T) {
	for _, cols := range []int{384, 40} {
		rows := 50
		r := rand.New(rand.NewPCG(uint64(cols), 1))
		vals := make([]float32, rows*cols)
		for i := 0; i < rows; i++ {
			s := 0.01 * float64(i+1)
			row := vals[i*cols : (i+1)*cols]
			for j := range row {
				k := float64(r.IntN(253) - 126) // -126..126
				row[j] = float32((k + 0.4999) * s)
			}
			row[0] = float32(127 * s) // the row's maximum: scale = s
		}
		m := &Model{threads: 1, log: quiet, tok: specialTokens{eot: rows - 1, space: -1},
			tokEmb: &weight{typ: typeF32, rows: rows, cols: cols, rowBytes: 4 * cols, f32: vals}}
		m.comp = &blasPath{m: m}
		m.buildShadow()
		if m.shadow == nil {
			t.Fatal("no shadow")
		}
		defer m.shadow.free()
		for i := 0; i < rows; i++ {
			x := make([]float32, cols)
			for j := range x {
				q := float32(int8(m.shadow.q[i*cols+j])) * m.shadow.scale[i]
				if vals[i*cols+j] >= q {
					x[j] = 1
				} else {
					x[j] = -1
				}
			}
			a, b, ok := m.shadowLogits(x)
			if !ok {
				t.Fatal("the shadow gave up")
			}
			sh := m.shadow
			m.shadow = nil
			exact := mustTextLogits(t, m, x)[i]
			m.shadow = sh
			d := math.Abs(float64(a[i]) - float64(exact))
			if d > float64(b[i]) || d < 0.95*float64(b[i]) {
				t.Fatalf("cols %d row %d: off by %v, bound %v", cols, i, d, b[i])
			}
		}
	}
}

// TestShadowBuild checks when a shadow is made: F16 and F32 embeddings get
// one, quantised ones and ones with values that are not finite do not.
func TestShadowBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	w := &weight{typ: typeQ8_0, rows: 64, cols: 64, rowBytes: 68}
	w.raw = randomBlocks(r, typeQ8_0, 64, 64)
	m := &Model{threads: 1, log: quiet, tokEmb: w}
	if m.buildShadow(); m.shadow != nil {
		t.Fatal("a Q8_0 embedding got a shadow")
	}
	vals := make([]float32, 64*64)
	m.tokEmb = &weight{typ: typeF32, rows: 64, cols: 64, rowBytes: 256, f32: vals}
	for _, v := range []float64{math.Inf(1), math.Inf(-1), math.NaN()} {
		for _, cols := range []int{64, 40} {
			m.tokEmb.cols, m.tokEmb.rowBytes, m.tokEmb.rows = cols, 4*cols, 64*64/cols
			vals[1000] = float32(v)
			if m.buildShadow(); m.shadow != nil {
				t.Fatalf("an embedding of %d columns holding %v got a shadow", cols, v)
			}
		}
	}
	vals[1000] = 1
	if m.buildShadow(); m.shadow == nil {
		t.Fatal("no shadow for a finite F32 embedding")
	}
	m.shadow.free()
	// A hidden state that is not finite or is zero falls back to the full product.
	m = shadowModel(t, typeF16, 500, 64, 1, 2)
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1)), 0} {
		x := make([]float32, 64)
		x[3] = v
		if _, ok := m.nextShadow(x, nil); ok {
			t.Fatalf("hidden state with %v: the shadow did not give up", v)
		}
	}
}

// TestShadowTranscribesAsFullProduct decodes a window of the demo model
// with and without the shadow: the same tokens and margins, nearly the same
// mean log-probability.
func TestShadowTranscribesAsFullProduct(t *testing.T) {
	path, _ := demoModel(t)
	cfg := DemoConfig()
	cfg.WeightType = "f32"
	f32 := filepath.Join(t.TempDir(), "f32.bin")
	if err := WriteModel(f32, cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, f32} {
		m, err := Load(p, Options{Threads: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if m.shadow == nil {
			t.Fatalf("%s: no shadow", p)
		}
		in := make([]float32, m.hp.NMels*windowFrames)
		m.logMel(chirp(4)).window(0, in)
		st := mustWindow(t, m, in, 0)
		fast, err := m.greedyWindow(context.Background(), st, 0, nil, -1, 60)
		if err != nil {
			t.Fatal(err)
		}
		sh := m.shadow
		m.shadow = nil
		full, err := m.greedyWindow(context.Background(), st, 0, nil, -1, 60)
		m.shadow = sh
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(fast.tokens, full.tokens) || len(fast.margins) != len(full.margins) {
			t.Fatalf("%s: tokens %v with the shadow, %v without", p, fast.tokens, full.tokens)
		}
		for i := range fast.margins {
			if fast.margins[i] != full.margins[i] {
				t.Fatalf("%s: margin %d: %v with the shadow, %v without", p, i, fast.margins[i], full.margins[i])
			}
		}
		if d := math.Abs(fast.avgLogprob - full.avgLogprob); d > 1e-3 {
			t.Fatalf("%s: avg logprob %v with the shadow, %v without", p, fast.avgLogprob, full.avgLogprob)
		}
	}
}

// TestPickFrom checks greedy decoding's rule over all logits (the SIMD
// kernel) against a plain loop: the highest logit, the lowest id on ties,
// and the highest of the others, for lengths around the vector widths, with
// the best at either end, exact ties, banned (-Inf) ids and NaNs.
func TestPickFrom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	ninf := float32(math.Inf(-1))
	for _, n := range []int{1, 2, 7, 8, 9, 16, 17, 33, 50257} {
		for trial := 0; trial < 30; trial++ {
			lg := make([]float32, n)
			for i := range lg {
				lg[i] = float32(math.Round(r.NormFloat64()*8) / 4) // coarse values make ties
			}
			switch trial % 6 {
			case 1:
				lg[0] = 100
			case 2:
				lg[n-1] = 100
			case 3:
				lg[r.IntN(n)], lg[r.IntN(n)] = 100, 100
			case 4:
				for i := range lg {
					if r.IntN(3) == 0 {
						lg[i] = ninf
					}
				}
			case 5:
				if n > 1 {
					lg[r.IntN(n-1)+1] = float32(math.NaN())
				}
			}
			want := pick{id: -1, logit: ninf, runner: ninf}
			for id, v := range lg {
				if v != v {
					continue
				}
				if want.id < 0 || v > want.logit {
					if want.id >= 0 {
						want.runner = want.logit
					}
					want.id, want.logit = id, v
				} else if v > want.runner {
					want.runner = v
				}
			}
			got := pickFrom(lg, nil)
			if got.id != want.id || got.logit != want.logit || got.runner != want.runner {
				t.Fatalf("n %d trial %d: got id %d logit %g runner %g, want %d %g %g", n, trial, got.id, got.logit, got.runner,
					want.id, want.logit, want.runner)
			}
		}
	}
}

// TestShadowCandidates checks the SIMD candidate selection against plain
// loops: the two highest lower ends (duplicates count twice, NaN never),
// every id whose upper end reaches the second, -Inf ids left out, and the
// overflow answer.
func TestShadowCandidates(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	ninf := float32(math.Inf(-1))
	for _, n := range []int{2, 8, 13, 64, 50257} {
		for trial := 0; trial < 40; trial++ {
			a, b := make([]float32, n), make([]float32, n)
			for i := range a {
				a[i] = float32(math.Round(r.NormFloat64()*8) / 4)
				b[i] = float32(r.IntN(4)) / 4
				switch r.IntN(20) {
				case 0:
					a[i], b[i] = ninf, 0
				case 1:
					a[i] = float32(math.NaN())
				}
			}
			l1, l2 := ninf, ninf
			for i, v := range a {
				if lo := v - b[i]; lo > l2 {
					if lo > l1 {
						l1, l2 = lo, l1
					} else {
						l2 = lo
					}
				}
			}
			var want []int32
			for i, v := range a {
				if v+b[i] >= l2 && v != ninf {
					want = append(want, int32(i))
				}
			}
			for _, maxc := range []int{1, len(want), len(want) + 3} {
				if maxc < 1 {
					continue
				}
				cand := make([]int32, maxc)
				got := shadowCandidates(a, b, cand)
				if len(want) > maxc {
					if got != maxc+1 {
						t.Fatalf("n %d trial %d max %d: %d candidates, want the overflow answer %d", n, trial, maxc, got, maxc+1)
					}
					continue
				}
				if !slices.Equal(cand[:got], want) {
					t.Fatalf("n %d trial %d max %d: candidates %v, want %v", n, trial, maxc, cand[:got], want)
				}
			}
		}
	}
}
