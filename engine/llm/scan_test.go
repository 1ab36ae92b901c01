package llm

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScanMatchesSortedFilter checks the scan's top-k, masked and not,
// against a brute-force one: the allowed logits sorted stably by decreasing
// value (equal logits by increasing id), cut to topK. Exactly the same ids
// and values, and as many, for random logits (some of them equal, some
// -Inf) and masks of every kind the scan treats apart: none allowed, one
// allowed (in a full mask word, the last word and the tail), sparse,
// dense, all allowed, and words all set or all clear next to mixed ones;
// with lengths around the scan's 64-token blocks. An allowed logit must
// enter the top-k however low it is when the higher ones are refused.
func TestScanMatchesSortedFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type maskKind struct {
		name  string
		allow func(i, n int) bool
	}
	one := func(at func(n int) int) func(i, n int) bool { return func(i, n int) bool { return i == at(n) } }
	dens := func(d float64) func(i, n int) bool { return func(int, int) bool { return rng.Float64() < d } }
	kinds := []maskKind{
		{"none", func(int, int) bool { return false }},
		{"one-first", one(func(int) int { return 0 })},
		{"one-middle", one(func(n int) int { return n / 2 })},
		{"one-last", one(func(n int) int { return n - 1 })},
		{"density-0.0005", dens(0.0005)},
		{"density-0.01", dens(0.01)},
		{"density-0.3", dens(0.3)},
		{"density-0.5", dens(0.5)},
		{"density-0.99", dens(0.99)},
		{"all", func(int, int) bool { return true }},
		// Whole words allowed and refused in turn, some mixed.
		{"words", func(i, n int) bool { return (i/64)%3 == 0 || ((i/64)%3 == 1 && i%5 == 0) }},
		// Only the lowest logits allowed: they must still fill the list.
		{"lowest", nil},
	}
	for _, n := range []int{1, 39, 40, 41, 63, 64, 65, 127, 128, 129, 1000, 4099, 151936} {
		for _, kind := range kinds {
			for _, ties := range []bool{false, true} {
				logits := make([]float32, n)
				for i := range logits {
					v := rng.NormFloat64() * 3
					if ties {
						v = math.Round(v * 2)
					}
					logits[i] = float32(v)
				}
				if ties && n > 100 {
					logits[n/3] = float32(math.Inf(-1))
				}
				mask := make([]uint64, (n+63)/64)
				var allowed []int
				for i := range logits {
					ok := false
					if kind.allow != nil {
						ok = kind.allow(i, n)
					} else {
						ok = logits[i] < -6
					}
					if ok {
						mask[i>>6] |= 1 << (i & 63)
						allowed = append(allowed, i)
					}
				}
				slices.SortStableFunc(allowed, func(a, b int) int { return cmpFloat(logits[b], logits[a]) })
				want := allowed[:min(topK, len(allowed))]
				s := newSampler(0, 1, 1)
				k, _ := s.scan(logits, mask)
				check := func(what string, k int) {
					t.Helper()
					if k != len(want) {
						t.Errorf("n=%d %s ties=%v %s: %d found, want %d", n, kind.name, ties, what, k, len(want))
						return
					}
					for i, id := range want {
						if int(s.ids[i]) != id || s.vals[i] != logits[id] {
							t.Errorf("n=%d %s ties=%v %s: top %d is %d (%v), want %d (%v)", n, kind.name, ties, what, i, s.ids[i], s.vals[i], id, logits[id])
							return
						}
					}
				}
				check("masked", k)
				if kind.name == "all" {
					k, _ = s.scan(logits, nil)
					check("unmasked", k)
				}
			}
		}
	}
}
