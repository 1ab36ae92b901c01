package llm

// #include "scan.h"
import "C"

import (
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"unicode"
	"unsafe"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// Sampling settings: llama.cpp's defaults for top-k, top-p and min-p.
const (
	topK = 40
	topP = 0.95
	minP = 0.05
	// diverseTemp is the temperature of the second and later candidates
	// when the request asks for temperature 0: the first candidate is the
	// greedy one and the others must differ from it.
	diverseTemp = 0.5
)

// sampler draws tokens for one candidate sequence with its own random
// stream, so a seed gives the same tokens whatever else is batched with it.
type sampler struct {
	temp float64
	rng  *rand.Rand
	// scratch buffers of the top-k scan, reused across steps.
	ids   [topK]int32
	vals  [topK]float32
	probs [topK]float64
}

func newSampler(temp float64, seed uint64, stream uint64) *sampler {
	return &sampler{temp: temp, rng: rand.New(rand.NewPCG(seed, stream))}
}

// sample picks the next token from logits and returns it with its
// log-probability under the untempered distribution (what ranking uses).
// Temperature 0 picks the most likely token. The scan over the vocabulary
// (top-k and log-sum-exp) runs in C (scan.c): it is most of a token's work
// outside llama.cpp.
func (s *sampler) sample(logits []float32) (int, float64) {
	k, logZ := s.scan(logits, nil)
	tok, lp, _ := s.pick(logits, k, logZ)
	return tok, lp
}

// scan finds the top-k logits among the tokens mask allows (nil: all; a
// bit per token, token i at bit i%64 of word i/64) into s.ids and s.vals,
// best first, and returns how many it found (0 when mask allows none) and
// the log-sum-exp of all the logits.
func (s *sampler) scan(logits []float32, mask []uint64) (int, float64) {
	var logZ C.double
	var k C.int
	if mask == nil {
		k = C.replyd_scan((*C.float)(unsafe.Pointer(&logits[0])), C.int(len(logits)), C.int(topK),
			(*C.int32_t)(unsafe.Pointer(&s.ids[0])), (*C.float)(unsafe.Pointer(&s.vals[0])), &logZ)
	} else {
		k = C.replyd_scan_masked((*C.float)(unsafe.Pointer(&logits[0])), C.int(len(logits)), C.int(topK),
			(*C.uint8_t)(unsafe.Pointer(&mask[0])), (*C.int32_t)(unsafe.Pointer(&s.ids[0])), (*C.float)(unsafe.Pointer(&s.vals[0])), &logZ)
	}
	return int(k), float64(logZ)
}

// pick draws among the k tokens of the last scan (s.ids, s.vals) and
// returns the token with its log-probability, logZ being the logits'
// log-sum-exp.
func (s *sampler) pick(logits []float32, k int, logZ float64) (int, float64, bool) {
	choice := int(s.ids[0])
	if s.temp > 0 && k > 1 {
		probs := s.probs[:k]
		var z float64
		for i, v := range s.vals[:k] {
			probs[i] = math.Exp(float64(v-s.vals[0]) / s.temp)
			z += probs[i]
		}
		// min-p: drop tokens below minP times the best one; top-p: keep
		// the smallest head whose mass reaches topP.
		n, mass := 0, 0.0
		for i, p := range probs {
			if i > 0 && (p < minP*probs[0] || mass >= topP*z) {
				break
			}
			mass += p
			n++
		}
		r := s.rng.Float64() * mass
		for i := 0; i < n; i++ {
			r -= probs[i]
			if r <= 0 || i == n-1 {
				choice = int(s.ids[i])
				break
			}
		}
	}
	return choice, float64(logits[choice]) - logZ, true
}

// cleanReply turns the raw bytes of a reply into display text with
// steer.Clean, the cleaning steering compares texts in: invalid UTF-8 and
// non-printable characters dropped, whitespace and control characters
// collapsed to single spaces, the ends trimmed.
func cleanReply(b []byte) string {
	return steer.Clean(string(b))
}

// dedupKey is the form two replies are compared in: lower case, letters and
// digits only, single spaces. Replies with an empty key count as empty.
func dedupKey(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			return unicode.ToLower(r)
		default:
			return ' '
		}
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// scored is one finished candidate before ranking.
type scored struct {
	text    string
	tokens  int
	logprob float64 // sum over the reply's tokens
	// sampled are the reply's tokens; whole: their pieces are the reply's
	// text before cleaning, no more.
	sampled []int
	whole   bool
}

// mean returns the mean token log-probability, -Inf for no tokens.
func (c scored) mean() float64 {
	if c.tokens == 0 {
		return math.Inf(-1)
	}
	return c.logprob / float64(c.tokens)
}

// uniqueCandidates keeps, in order, the non-empty candidates whose dedupKey
// was not seen before, skipping keys already in seen (which it updates).
func uniqueCandidates(cands []scored, seen map[string]bool) []scored {
	var out []scored
	for _, c := range cands {
		k := dedupKey(c.text)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, c)
	}
	return out
}

// candidate is c as the engine reports it, at rank.
func (c scored) candidate(rank int) engine.Candidate {
	return engine.Candidate{Text: c.text, Rank: rank, Length: c.tokens, MeanLogProb: c.mean()}
}

// scored is c's reply once it ended.
func (c *cand) scored() scored {
	return scored{text: cleanReply(c.text), tokens: len(c.tokens), logprob: c.logprob, sampled: c.replyTokens(), whole: !c.cut}
}

// rankCandidates sorts candidates that ended together (in the same decode
// step, or a steered round whose best are chosen) by mean token
// log-probability, best first; ties keep their sampling order.
func rankCandidates(cands []scored) {
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].mean() > cands[j].mean() })
}
