package recall

import (
	"math"
	"slices"

	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/store"
)

// BM25's usual parameters: term-frequency saturation and length
// normalisation.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// minRelScore drops matches scoring under this share of the best one: in a
// small memory a shared "a" or "go" still scores, and an example that only
// shares a function word is noise in the prompt.
const minRelScore = 0.4

// Index is a BM25 index over the partner turns of one user's pairs. It is
// immutable once built and safe for concurrent searches.
type Index struct {
	pairs []store.Pair
	norm  []float32 // per pair: k1 * (1 - b + b * length / average length)
	post  map[string][]posting
}

type posting struct {
	doc int32
	tf  uint16
}

// Build indexes pairs (oldest first) by the words of their partner turns.
func Build(pairs []store.Pair) *Index {
	ix := &Index{pairs: pairs, norm: make([]float32, len(pairs)), post: map[string][]posting{}}
	lens := make([]int, len(pairs))
	total := 0
	tf := map[string]uint16{}
	for i, p := range pairs {
		clear(tf)
		toks := score.Tokens(p.Partner)
		for _, t := range toks {
			tf[t]++
		}
		for t, n := range tf {
			ix.post[t] = append(ix.post[t], posting{doc: int32(i), tf: n})
		}
		lens[i] = len(toks)
		total += len(toks)
	}
	if total > 0 {
		avg := float64(total) / float64(len(pairs))
		for i, n := range lens {
			ix.norm[i] = float32(bm25K1 * (1 - bm25B + bm25B*float64(n)/avg))
		}
	}
	return ix
}

// Len returns the number of pairs indexed.
func (ix *Index) Len() int { return len(ix.pairs) }

// Search returns up to k pairs whose partner turns share words with query,
// best BM25 score first (the newer of two equal scores first), leaving out
// those scoring under minRelScore of the best and those whose reply
// repeats one already chosen after normalisation.
func (ix *Index) Search(query string, k int) []store.Pair {
	if k <= 0 || len(ix.pairs) == 0 {
		return nil
	}
	n := float64(len(ix.pairs))
	scores := make([]float32, len(ix.pairs))
	var hit []int32
	seen := map[string]bool{}
	for _, t := range score.Tokens(query) {
		if seen[t] {
			continue
		}
		seen[t] = true
		ps := ix.post[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		w := float32(math.Log(1+(n-df+0.5)/(df+0.5)) * (bm25K1 + 1))
		for _, p := range ps {
			tf := float32(p.tf)
			if scores[p.doc] == 0 {
				hit = append(hit, p.doc)
			}
			scores[p.doc] += w * tf / (tf + ix.norm[p.doc])
		}
	}
	better := func(a, b int32) bool { // a ranks before b
		if scores[a] != scores[b] {
			return scores[a] > scores[b]
		}
		return a > b // newer first
	}
	// The best few by insertion (hits are many, k is at most a handful);
	// all of them, sorted, only when repeated replies leave too few.
	top := make([]int32, 0, k+8)
	for _, d := range hit {
		if len(top) == cap(top) {
			if !better(d, top[len(top)-1]) {
				continue
			}
			top = top[:len(top)-1]
		}
		i := len(top)
		top = append(top, d)
		for ; i > 0 && better(d, top[i-1]); i-- {
			top[i] = top[i-1]
		}
		top[i] = d
	}
	out := pick(ix.pairs, top, scores, k)
	if len(out) < k && len(hit) > len(top) {
		slices.SortFunc(hit, func(a, b int32) int {
			if better(a, b) {
				return -1
			}
			return 1
		})
		out = pick(ix.pairs, hit, scores, k)
	}
	return out
}

// pick returns up to k pairs of ranked (best first), leaving out those
// under minRelScore of the best and repeated replies.
func pick(pairs []store.Pair, ranked []int32, scores []float32, k int) []store.Pair {
	var out []store.Pair
	replies := map[string]bool{}
	for _, d := range ranked {
		if scores[d] < minRelScore*scores[ranked[0]] {
			break
		}
		p := pairs[d]
		r := score.Normalize(p.Reply)
		if replies[r] {
			continue
		}
		replies[r] = true
		out = append(out, p)
		if len(out) == k {
			break
		}
	}
	return out
}
