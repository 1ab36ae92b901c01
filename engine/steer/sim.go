package steer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/replyd/replyd/engine"
)

// Sim is a simulated user's way of steering towards a reply it means to
// say (issue 22): the constraint it types for the reply, and the keys
// that cost. `replyd eval --steer` and the models package's comparison of
// steered turns both replay with it.
type Sim struct {
	Name string
	// Make returns the constraint for reply and the keys pressed, ok false
	// when the reply does not lend itself (no word, shorter than N).
	Make func(reply string) (s engine.Steer, keys int, ok bool)
}

// ParseSim parses a simulated user's name: initials, words, prefix:N or
// replace. Its errors name the value, not the flag that gave it.
func ParseSim(v string) (Sim, error) {
	lower := func(w string) string { return strings.ToLower(w) }
	switch {
	case v == "initials":
		return Sim{v, func(reply string) (engine.Steer, int, bool) {
			ws := Words(Clean(reply))
			if len(ws) == 0 || len(ws) > MaxWords {
				return engine.Steer{}, 0, false
			}
			e := make([]string, len(ws))
			for i, w := range ws {
				r, _ := utf8.DecodeRuneInString(w.Text)
				e[i] = lower(string(r))
			}
			return engine.Steer{Mode: engine.SteerWords, Words: e}, len(e), true
		}}, nil
	case v == "words":
		return Sim{v, func(reply string) (engine.Steer, int, bool) {
			ws := Words(Clean(reply))
			if len(ws) == 0 || len(ws) > MaxWords {
				return engine.Steer{}, 0, false
			}
			longest := 0
			for i, w := range ws {
				if utf8.RuneCountInString(w.Text) > utf8.RuneCountInString(ws[longest].Text) {
					longest = i
				}
			}
			e := make([]string, len(ws))
			keys := 0
			for i, w := range ws {
				r, _ := utf8.DecodeRuneInString(w.Text)
				e[i] = lower(string(r))
				if i == longest && utf8.RuneCountInString(w.Text) <= MaxEntryChars {
					// Spelled whole: its letters, and one key to switch
					// the chip to spelling.
					e[i] = lower(w.Text)
					keys += 1
				}
				keys += utf8.RuneCountInString(e[i])
			}
			return engine.Steer{Mode: engine.SteerWords, Words: e}, keys, true
		}}, nil
	case strings.HasPrefix(v, "prefix:"):
		n, err := strconv.Atoi(strings.TrimPrefix(v, "prefix:"))
		if err != nil || n < 1 || n > MaxTextChars {
			return Sim{}, fmt.Errorf("prefix:N needs N from 1 to %d", MaxTextChars)
		}
		return Sim{v, func(reply string) (engine.Steer, int, bool) {
			rs := []rune(Clean(reply))
			if len(rs) <= n {
				return engine.Steer{}, 0, false
			}
			return engine.Steer{Mode: engine.SteerPrefix, Prefix: string(rs[:n])}, n, true
		}}, nil
	case v == "replace":
		return Sim{v, func(reply string) (engine.Steer, int, bool) {
			text := Clean(reply)
			ws := Words(text)
			if len(ws) == 0 || utf8.RuneCountInString(text) > MaxTextChars {
				return engine.Steer{}, 0, false
			}
			// A near miss: the longest word wrong (same initial, letters
			// no English word has); the user taps it for alternatives.
			k := 0
			for i, w := range ws {
				if utf8.RuneCountInString(w.Text) > utf8.RuneCountInString(ws[k].Text) {
					k = i
				}
			}
			r, _ := utf8.DecodeRuneInString(ws[k].Text)
			miss := text[:ws[k].Start] + string(r) + "qxj" + text[ws[k].End:]
			return engine.Steer{Mode: engine.SteerReplace, Text: miss, Word: k}, 1, true
		}}, nil
	}
	return Sim{}, fmt.Errorf("must be initials, words, prefix:N or replace, not %q", v)
}
