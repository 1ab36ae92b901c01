// Package score measures how close a suggested reply came to what the AAC
// user really said: the keystrokes a suggestion saved, exact matches after
// normalising case and punctuation, and token F1. The feedback endpoint and
// `replyd eval` both use it, so a clinic's live figures and its offline
// replays are computed the same way. Lengths are in Unicode code points
// (what an on-screen keyboard types), never bytes.
package score

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Chars returns the length of s in characters (Unicode code points).
func Chars(s string) int { return utf8.RuneCountInString(s) }

// EditDistance returns the Levenshtein distance between a and b in
// characters: the fewest insertions, deletions and substitutions that turn
// a into b. It uses memory in proportion to the shorter one.
func EditDistance(a, b string) int { return levenshtein([]rune(a), []rune(b)) }

// levenshtein is the Levenshtein distance between the sequences a and b,
// in O(min(len(a), len(b))) memory: the rows of the dynamic programme over
// the longer one, each as long as the shorter one.
func levenshtein[T comparable](a, b []T) int {
	if len(a) < len(b) {
		a, b = b, a
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// SpokenAsIs is the keystrokes saved by speaking a suggestion unchanged: its
// length minus the one selection, never below 0.
func SpokenAsIs(suggestion string) int { return max(Chars(suggestion)-1, 0) }

// Edited is the keystrokes saved by taking a suggestion and editing it into
// final: final's length, minus the edits (EditDistance), minus the one
// selection, never below 0. Edited(s, s) equals SpokenAsIs(s).
func Edited(suggestion, final string) int {
	return max(Chars(final)-EditDistance(suggestion, final)-1, 0)
}

// Normalize lower-cases s, drops punctuation and symbols, and collapses
// white space, so that "Yes, please!" and "yes please" compare equal.
func Normalize(s string) string { return strings.Join(Tokens(s), " ") }

// Tokens splits s into lower-case words: runs of letters and digits
// (apostrophes inside a word are dropped, so "don't" is "dont").
func Tokens(s string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			out = append(out, b.String())
			b.Reset()
		}
	}
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(unicode.ToLower(r))
		case r == '\'' || r == '’':
			// inside a word: keep going
		default:
			flush()
		}
	}
	flush()
	return out
}

// TokenF1 is the harmonic mean of token precision and recall between a
// candidate and the reference (SQuAD's F1 over bags of normalised words).
// Two empty texts score 1; one empty text scores 0.
func TokenF1(candidate, reference string) float64 {
	c, r := Tokens(candidate), Tokens(reference)
	if len(c) == 0 || len(r) == 0 {
		if len(c) == len(r) {
			return 1
		}
		return 0
	}
	count := make(map[string]int, len(r))
	for _, t := range r {
		count[t]++
	}
	common := 0
	for _, t := range c {
		if count[t] > 0 {
			count[t]--
			common++
		}
	}
	if common == 0 {
		return 0
	}
	p := float64(common) / float64(len(c))
	rec := float64(common) / float64(len(r))
	return 2 * p * rec / (p + rec)
}

// WordEditDistance returns the Levenshtein distance between a and b in
// words (Tokens: case and punctuation ignored): the fewest word
// insertions, deletions and substitutions that turn a into b. "I'd like
// tea" and "I'd like some tea" are 1 apart.
func WordEditDistance(a, b string) int { return levenshtein(Tokens(a), Tokens(b)) }
