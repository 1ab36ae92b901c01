// Package steertest makes random steering constraints and texts that meet
// them, for the property tests of engine/steer and the language model.
package steertest

import (
	"math/rand/v2"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// Targets are replies a user might want: capitals, apostrophes, hyphens,
// digits and the letters q, x and z among them.
var Targets = []string{
	"I would like tea", "Yes please", "No thanks, maybe later.", "I'm tired", "Can we go outside?",
	"Quiet please", "Xavier is coming at 3", "The zoo was well-known", "Fix the TV at 10 o'clock",
	"Don't worry about it", "Quick question for you", "I need the toilet", "Put the radio on",
	"My back hurts a bit", "Zip it up please", "Sixty-six years old", "Where is my phone?",
	"Ask the physio", "Thank you so much!", "Is it Tuesday?", "Text my sister", "Jazz music, now",
}

const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func pick(rng *rand.Rand, s string) string {
	rs := []rune(s)
	return string(rs[rng.IntN(len(rs))])
}

func upperMaybe(rng *rand.Rand, s string) string {
	if rng.IntN(3) == 0 {
		return strings.ToUpper(s)
	}
	return s
}

// Random returns a valid random constraint and the reply it was made from
// ("" when it was made of random letters): initials, initials with a word
// spelled (partly or whole, or "" for any word), random letters and
// digits, a prefix cut anywhere (often mid-word), or a replaced word.
func Random(rng *rand.Rand) (engine.Steer, string) {
	target := Targets[rng.IntN(len(Targets))]
	words := steer.Words(target)
	switch rng.IntN(6) {
	case 0: // initials
		var e []string
		for _, w := range words {
			e = append(e, upperMaybe(rng, string([]rune(w.Text)[:1])))
		}
		return engine.Steer{Mode: engine.SteerWords, Words: e}, target
	case 1: // initials with one or two words spelled
		var e []string
		for _, w := range words {
			e = append(e, string([]rune(w.Text)[:1]))
		}
		for range 1 + rng.IntN(2) {
			i := rng.IntN(len(words))
			rs := []rune(words[i].Text)
			switch rng.IntN(4) {
			case 0:
				e[i] = strings.ToLower(words[i].Text) + " "
			case 1:
				e[i] = ""
			default:
				e[i] = upperMaybe(rng, string(rs[:1+rng.IntN(len(rs))]))
			}
		}
		return engine.Steer{Mode: engine.SteerWords, Words: e}, target
	case 2: // random letters and digits
		e := make([]string, 1+rng.IntN(5))
		for i := range e {
			e[i] = pick(rng, letters)
			if rng.IntN(8) == 0 {
				e[i] += pick(rng, "aeiou")
			}
		}
		return engine.Steer{Mode: engine.SteerWords, Words: e}, ""
	case 3, 4: // a prefix, mostly mid-word
		rs := []rune(target)
		n := 1 + rng.IntN(len(rs)-1)
		return engine.Steer{Mode: engine.SteerPrefix, Prefix: string(rs[:n])}, target
	default: // one word replaced
		s := engine.Steer{Mode: engine.SteerReplace, Text: target, Word: rng.IntN(len(words))}
		if rng.IntN(3) == 0 {
			s.Initial = pick(rng, "abcdefghijklmnopqrstuvwxyzQXZ")
		}
		return s, target
	}
}

// Example returns a text that meets s (before cleaning: it may hold extra
// spaces), made with rng.
func Example(rng *rand.Rand, s engine.Steer) string {
	word := func(entry string) string {
		if strings.HasSuffix(entry, " ") {
			return upperMaybe(rng, strings.TrimSuffix(entry, " "))
		}
		w := entry
		if r, _ := utf8.DecodeLastRuneInString(w); w == "" || steer.IsJoiner(r) || rng.IntN(2) == 0 {
			for range 1 + rng.IntN(4) {
				w += pick(rng, "abcdefghijklmnopqrstuvwxyz")
			}
		}
		if rng.IntN(10) == 0 {
			w += "'s"
		}
		return w
	}
	seps := []string{" ", " ", " ", ", ", "  ", " - ", "! "}
	switch s.Mode {
	case engine.SteerWords:
		var b strings.Builder
		for i, e := range s.Words {
			if i > 0 {
				b.WriteString(seps[rng.IntN(len(seps))])
			}
			b.WriteString(word(e))
		}
		b.WriteString([]string{"", "", ".", "!", "?", " ..."}[rng.IntN(6)])
		return b.String()
	case engine.SteerPrefix:
		return s.Prefix + []string{"x", "yz tea", " and more", "ke it.", "!"}[rng.IntN(5)]
	case engine.SteerReplace:
		text := steer.Clean(s.Text)
		w := steer.Words(text)[s.Word]
		initial := s.Initial
		if initial == "" {
			initial = string([]rune(w.Text)[:1])
		}
		for {
			nw := initial
			for range rng.IntN(5) {
				nw += pick(rng, "abcdefghijklmnopqrstuvwxyz")
			}
			if !strings.EqualFold(nw, w.Text) {
				return text[:w.Start] + nw + text[w.End:]
			}
		}
	}
	return ""
}

// Mutate changes text a little: a character inserted, deleted or replaced,
// a case flipped, spaces or punctuation added.
func Mutate(rng *rand.Rand, text string) string {
	rs := []rune(text)
	alphabet := []rune("abqxzAQXZ019 '’-‐,.!\t\"é😀\U000E0101") // no newline: it ends a reply
	for range 1 + rng.IntN(3) {
		i := 0
		if len(rs) > 0 {
			i = rng.IntN(len(rs) + 1)
		}
		switch rng.IntN(5) {
		case 0:
			rs = append(rs[:i], append([]rune{alphabet[rng.IntN(len(alphabet))]}, rs[i:]...)...)
		case 1:
			if i < len(rs) {
				rs = append(rs[:i], rs[i+1:]...)
			}
		case 2:
			if i < len(rs) {
				rs[i] = alphabet[rng.IntN(len(alphabet))]
			}
		case 3:
			if i < len(rs) {
				if unicode.IsUpper(rs[i]) {
					rs[i] = unicode.ToLower(rs[i])
				} else {
					rs[i] = unicode.ToUpper(rs[i])
				}
			}
		default:
			rs = append(rs[:i], append([]rune("  "), rs[i:]...)...)
		}
	}
	out := string(rs)
	if !utf8.ValidString(out) {
		return text
	}
	return out
}
