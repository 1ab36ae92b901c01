package whisper

import (
	"context"
	"math"
	"slices"
	"testing"
)

// TestMT19937: the generator and std::discrete_distribution draw what
// libstdc++ draws (values printed by a C++ program built with g++:
// std::mt19937's 10000th output with the default seed, and eight draws of
// discrete_distribution{0.1, 0, 0.5, 0.25, 0.15} with seeds 5489 and 3).
func TestMT19937(t *testing.T) {
	r := newMT19937(5489)
	var v uint32
	for range 10000 {
		v = r.next()
	}
	if v != 4123659995 {
		t.Fatalf("10000th output %d, want 4123659995", v)
	}
	w := []float32{0.1, 0, 0.5, 0.25, 0.15}
	for seed, want := range map[uint32][]int{5489: {2, 3, 4, 2, 2, 2, 2, 4}, 3: {0, 3, 2, 2, 2, 0, 0, 2}} {
		r := newMT19937(seed)
		var got []int
		for range want {
			got = append(got, r.discrete(w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("seed %d: draws %v, libstdc++ %v", seed, got, want)
		}
	}
}

func TestTemperaturesAndCap(t *testing.T) {
	got := temperatures(true)
	want := []float32{0, 0.2, 0.4, 0.6, 0.8, 1.0}
	if len(got) != len(want) {
		t.Fatalf("temperatures %v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("temperatures %v, want %v", got, want)
		}
	}
	if got := temperatures(false); !slices.Equal(got, []float32{0}) {
		t.Fatalf("without fallback %v", got)
	}
	for _, tc := range []struct{ samples, cap int }{{1, 33}, {SampleRate, 44}, {SampleRate / 2, 38}, {30 * SampleRate, 392}} {
		if got := tokenCap(tc.samples); got != tc.cap {
			t.Errorf("tokenCap(%d) = %d, want %d", tc.samples, got, tc.cap)
		}
	}
}

func TestEntropy(t *testing.T) {
	loop := make([]int, 40)
	if e := entropy(loop); e != 0 {
		t.Fatalf("one token repeated: entropy %v", e)
	}
	var two []int
	for i := range 40 {
		two = append(two, i%2)
	}
	if e := entropy(two); math.Abs(e-math.Log(2)) > 1e-12 {
		t.Fatalf("two tokens alternating: entropy %v", e)
	}
	var all []int
	for i := range 40 {
		all = append(all, i)
	}
	if e := entropy(all); math.Abs(e-math.Log(32)) > 1e-12 {
		t.Fatalf("distinct tokens: entropy %v, want ln 32 (the last 32 count)", e)
	}
}

// loopModel loads the demo model with its final layer norm crafted so that
// every decoder step ends in the same hidden state: 5 × the token
// embedding's row of one token. Its logit then stands far above all others
// at every step and every temperature up to 1: the decoder repeats that
// token for ever, the loop whisper.cpp's safeguards are for.
func loopModel(t *testing.T) (*Model, int) {
	m := loadDemo(t, Options{Threads: 1})
	const tok = 1234
	d := m.hp.NTextState
	row := make([]float32, d)
	m.tokEmb.row(tok, row)
	for i := range d {
		m.decLn.w[i] = 0
		m.decLn.b[i] = 5 * row[i]
	}
	return m, tok
}

// TestFallbackOnLoop: a window stuck in a loop runs to the token cap (not
// to whisper.cpp's 220), fails the entropy rule, and is decoded again at
// every temperature with five sampled decoders; the last attempt is kept,
// as whisper.cpp keeps it. The tokens decoded are bounded by the cap:
// (1 + 5·5) × cap, whatever the loop.
func TestFallbackOnLoop(t *testing.T) {
	m, tok := loopModel(t)
	pcm := chirp(1)
	capN := tokenCap(len(pcm))
	res, err := m.runWith(context.Background(), pcm, -1, m.maxTok, true)
	if err != nil {
		t.Fatal(err)
	}
	w := res.windows[0]
	if w.attempts != 6 || !w.failed || math.Abs(w.temperature-1) > 1e-6 {
		t.Fatalf("attempts %d, failed %v, temperature %v; want 6 attempts, the last (1.0) kept and failed", w.attempts, w.failed, w.temperature)
	}
	if len(w.tokens) != capN {
		t.Fatalf("%d tokens kept, cap %d", len(w.tokens), capN)
	}
	for _, id := range w.tokens {
		if id != tok {
			t.Fatalf("token %d in the loop of %d", id, tok)
		}
	}
	if want := (1 + 5*5) * capN; res.decoded != want {
		t.Fatalf("%d tokens decoded, want (1+5·5)·cap = %d", res.decoded, want)
	}
	// Without the fallback: one greedy attempt, still capped.
	res, err = m.runWith(context.Background(), pcm, -1, m.maxTok, false)
	if err != nil {
		t.Fatal(err)
	}
	if w := res.windows[0]; len(w.tokens) != capN || res.decoded != capN || w.attempts != 0 {
		t.Fatalf("no fallback: %d tokens, %d decoded, %d attempts; want %d, %d, 0", len(w.tokens), res.decoded, w.attempts, capN, capN)
	}
}

// TestFallbackOnLogprob: the demo model's random weights give windows whose
// mean log-probability is far below -1 with a low no-speech probability,
// so the fallback samples at higher temperatures; with the generators
// seeded as whisper.cpp seeds them, two runs give the same tokens.
func TestFallbackOnLogprob(t *testing.T) {
	m := loadDemo(t, Options{Threads: 1})
	pcm := chirp(2)
	greedy, err := m.runWith(context.Background(), pcm, -1, m.maxTok, false)
	if err != nil {
		t.Fatal(err)
	}
	g := greedy.windows[0]
	if !(g.avgLogprob < logprobThold && g.noSpeechProb < noSpeechThold) {
		t.Skipf("the demo model's greedy window passes (mean log-probability %.2f, no-speech %.2f)", g.avgLogprob, g.noSpeechProb)
	}
	a, err := m.runWith(context.Background(), pcm, -1, m.maxTok, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.runWith(context.Background(), pcm, -1, m.maxTok, true)
	if err != nil {
		t.Fatal(err)
	}
	wa, wb := a.windows[0], b.windows[0]
	if wa.attempts < 2 || wa.temperature == 0 {
		t.Fatalf("the fallback did not fire: %d attempts at %.1f", wa.attempts, wa.temperature)
	}
	if !slices.Equal(wa.tokens, wb.tokens) || wa.attempts != wb.attempts {
		t.Fatalf("two runs differ: %v (%d attempts) and %v (%d)", wa.tokens, wa.attempts, wb.tokens, wb.attempts)
	}
	if len(wa.tokens) > tokenCap(len(pcm)) {
		t.Fatalf("%d tokens over the cap %d", len(wa.tokens), tokenCap(len(pcm)))
	}
	t.Logf("kept the attempt at %.1f after %d temperatures: %d tokens, mean log-probability %.2f", wa.temperature, wa.attempts, len(wa.tokens), wa.avgLogprob)
}
