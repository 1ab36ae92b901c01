// Package steer defines what a steered request's constraint means on text
// and checks text against it as it is written, byte by byte, so that the
// language model's sampler can refuse every token that would break it.
//
// A word is a run of letters, combining marks and digits, joined by inner
// apostrophes (' or ’) or hyphens (- or ‐): "I'm" and "well-known" are one
// word each. Everything else (spaces, punctuation, symbols) separates
// words. Text is compared after the cleaning every reply gets (Clean):
// whitespace collapsed to single spaces and trimmed.
//
// Letters compare without case, and a plain letter typed by the user
// matches the same letter with diacritics in the reply ("u" matches "ü",
// "e" matches "é", "и" matches "й", "ا" matches "أ"), in every
// language; a letter typed with its diacritic matches only itself ("ü" does
// not match "u", "ñ" does not match "n"). See fits.
//
// A Program is a compiled constraint; a State is where a reply written so
// far stands in it. States are small comparable values: the sampler keeps
// one per candidate and caches the set of tokens allowed in each.
package steer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/replyd/replyd/engine"
)

// Limits of a constraint (the API's validation uses them too).
const (
	MaxWords      = 16  // entries of a words constraint
	MaxEntryChars = 32  // characters of one entry
	MaxTextChars  = 200 // characters of a prefix or of a replace text
)

// IsWordRune reports whether r belongs to a word: a letter, a combining
// mark or a digit.
func IsWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&aWord != 0
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r)
}

// ascii classifies the ASCII characters once: the sampler steps through
// hundreds of thousands of token bytes a request.
var ascii = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			t[r] |= aWord
		}
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			t[r] |= aSpace
		}
		if unicode.IsPrint(r) {
			t[r] |= aPrint
		}
	}
	return t
}()

const (
	aWord uint8 = 1 << iota
	aSpace
	aPrint
)

// IsJoiner reports whether r joins two word runes into one word when it
// sits between them: an apostrophe or a hyphen.
func IsJoiner(r rune) bool {
	switch r {
	case '\'', '’', '-', '‐':
		return true
	}
	return false
}

// fold is the case-insensitive form of a rune that words are compared in;
// the typographic apostrophe and hyphen compare equal to the ASCII ones.
func fold(r rune) rune {
	switch r {
	case '’':
		return '\''
	case '‐':
		return '-'
	}
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	return unicode.ToLower(r)
}

// plain maps a (lower-case) letter with diacritics to its plain letter:
// the first rune of its canonical decomposition when the rest are
// combining marks (é → e, ü → u, ą → a, й → и, أ → ا), and the letters
// Unicode does not decompose but whose users write them plain (ł, ø, đ).
var plain = func() map[rune]rune {
	m := map[rune]rune{'ł': 'l', 'ø': 'o', 'đ': 'd', 'ħ': 'h'}
	for r := rune(0xC0); r < 0x2000; r++ {
		if !unicode.IsLetter(r) {
			continue
		}
		d := []rune(norm.NFD.String(string(r)))
		if len(d) < 2 || !unicode.IsLetter(d[0]) {
			continue
		}
		marks := true
		for _, c := range d[1:] {
			marks = marks && unicode.Is(unicode.Mn, c)
		}
		if marks {
			m[r] = d[0]
		}
	}
	return m
}()

// fits reports whether the folded rune r of a reply fits the folded rune
// e the user typed: the same letter, or e is a plain letter and r is e
// with diacritics. The sampler calls it for every rune that differs from
// the entry's, so the equal case costs one comparison.
func fits(e, r rune) bool {
	if e == r {
		return true
	}
	if r < utf8.RuneSelf {
		return false
	}
	p, ok := plain[r]
	return ok && p == e
}

func foldString(s string) []rune {
	rs := []rune(s)
	for i, r := range rs {
		rs[i] = fold(r)
	}
	return rs
}

// isSpace reports whether the cleaning turns r into a space.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&aSpace != 0
	}
	return unicode.IsControl(r) || unicode.IsSpace(r)
}

// isPrint is unicode.IsPrint.
func isPrint(r rune) bool {
	if r < utf8.RuneSelf {
		return ascii[r]&aPrint != 0
	}
	return unicode.IsPrint(r)
}

// Clean is the cleaning a reply's text gets: invalid UTF-8 and
// non-printable characters dropped, whitespace and control characters
// collapsed to single spaces, and the ends trimmed.
func Clean(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if isSpace(r) {
			return ' '
		}
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// Word is one word of a text and where it sits (byte offsets).
type Word struct {
	Text       string
	Start, End int
}

// Words splits text into its words (see the package comment).
func Words(text string) []Word {
	var out []Word
	start := -1
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		switch {
		case IsWordRune(r):
			if start < 0 {
				start = i
			}
		case start >= 0 && IsJoiner(r):
			// Inner only when a word rune follows directly.
			if nr, _ := utf8.DecodeRuneInString(text[i+n:]); i+n < len(text) && IsWordRune(nr) {
				break
			}
			out = append(out, Word{text[start:i], start, i})
			start = -1
		default:
			if start >= 0 {
				out = append(out, Word{text[start:i], start, i})
				start = -1
			}
		}
		i += n
	}
	if start >= 0 {
		out = append(out, Word{text[start:], start, len(text)})
	}
	return out
}

// Validate checks a constraint and returns an error whose message names
// the offending field as the API's payload spells it (steer.words[2], ...).
func Validate(s engine.Steer) error {
	switch s.Mode {
	case engine.SteerWords:
		if len(s.Words) < 1 || len(s.Words) > MaxWords {
			return fmt.Errorf("steer.words must have 1 to %d entries (one per word of the reply)", MaxWords)
		}
		for i, w := range s.Words {
			if n := utf8.RuneCountInString(w); n > MaxEntryChars {
				return fmt.Errorf("steer.words[%d] has %d characters; the limit is %d", i, n, MaxEntryChars)
			}
			if !utf8.ValidString(w) {
				return fmt.Errorf("steer.words[%d] is not valid UTF-8", i)
			}
			body := strings.TrimSuffix(w, " ")
			if w != "" && body == "" {
				return fmt.Errorf("steer.words[%d] is only a space; use \"\" for any word", i)
			}
			if !isWordStart(body) {
				return fmt.Errorf("steer.words[%d] must be the beginning of one word: letters and digits, joined by inner apostrophes or hyphens, optionally ending in one space for the whole word", i)
			}
		}
	case engine.SteerPrefix:
		n := utf8.RuneCountInString(s.Prefix)
		if n < 1 || n > MaxTextChars {
			return fmt.Errorf("steer.prefix must have 1 to %d characters", MaxTextChars)
		}
		if Clean(s.Prefix) == "" {
			return fmt.Errorf("steer.prefix holds no printable characters")
		}
	case engine.SteerReplace:
		n := utf8.RuneCountInString(s.Text)
		if n < 1 || n > MaxTextChars {
			return fmt.Errorf("steer.replace.text must have 1 to %d characters", MaxTextChars)
		}
		ws := Words(Clean(s.Text))
		if s.Word < 0 || s.Word >= len(ws) {
			return fmt.Errorf("steer.replace.word is %d but steer.replace.text has %d words (word is 0-based)", s.Word, len(ws))
		}
		if s.Initial != "" {
			r, size := utf8.DecodeRuneInString(s.Initial)
			if size != len(s.Initial) || !IsWordRune(r) || unicode.IsMark(r) {
				return fmt.Errorf("steer.replace.initial must be a single letter or digit")
			}
		}
	case "":
		return fmt.Errorf("steer must have exactly one of words, prefix or replace")
	default:
		return fmt.Errorf("steer mode %q is not words, prefix or replace", s.Mode)
	}
	return nil
}

// isWordStart reports whether s can begin a word: word runes joined by
// single inner joiners, possibly ending in one joiner ("don'").
func isWordStart(s string) bool {
	prev := rune(0) // 0: start, 'w': word rune, 'j': joiner
	for _, r := range s {
		switch {
		case IsWordRune(r):
			prev = 'w'
		case IsJoiner(r) && prev == 'w':
			prev = 'j'
		default:
			return false
		}
	}
	return true
}

// Matches reports whether the cleaned reply text meets s. It is written
// independently of Program (on whole words, not byte by byte) and serves
// as the oracle of the tests; Program accepts exactly the texts whose
// cleaning Matches.
func Matches(s engine.Steer, text string) bool {
	switch s.Mode {
	case engine.SteerWords:
		ws := Words(text)
		if len(ws) != len(s.Words) || len(ws) == 0 || ws[0].Start != 0 {
			return false
		}
		for i, w := range ws {
			entry := s.Words[i]
			whole := strings.HasSuffix(entry, " ")
			e, got := foldString(strings.TrimSuffix(entry, " ")), foldString(w.Text)
			if len(got) < len(e) || (whole && len(got) != len(e)) {
				return false
			}
			for k := range e {
				if !fits(e[k], got[k]) {
					return false
				}
			}
		}
		return true
	case engine.SteerPrefix:
		p := cleanPrefix(s.Prefix)
		return strings.HasPrefix(text, p) && len(strings.TrimSpace(text[len(p):])) > 0
	case engine.SteerReplace:
		orig := Clean(s.Text)
		ws := Words(orig)
		if s.Word < 0 || s.Word >= len(ws) {
			return false
		}
		w := ws[s.Word]
		before, after := orig[:w.Start], orig[w.End:]
		if !strings.HasPrefix(text, before) || !strings.HasSuffix(text, after) || len(text) < len(before)+len(after) {
			return false
		}
		mid := text[len(before) : len(text)-len(after)]
		mw := Words(mid)
		if len(mw) != 1 || mw[0].Text != mid {
			return false
		}
		// The new word must be a whole word of the candidate, not glued
		// to the text around it by a joiner.
		if cw := Words(text); !containsWord(cw, len(before), len(text)-len(after)) {
			return false
		}
		initial := s.Initial
		if initial == "" {
			initial = w.Text
		}
		fi, fm := foldString(initial), foldString(mid)
		return fits(fi[0], fm[0]) && string(fm) != string(foldString(w.Text))
	}
	return false
}

func containsWord(ws []Word, start, end int) bool {
	for _, w := range ws {
		if w.Start == start && w.End == end {
			return true
		}
	}
	return false
}

// cleanPrefix is a prefix as replies must begin with it: cleaned, with one
// trailing space kept when it ended in whitespace (the word is finished).
func cleanPrefix(p string) string {
	c := Clean(p)
	if c != "" && strings.TrimRightFunc(p, isSpace) != p {
		c += " "
	}
	return c
}
