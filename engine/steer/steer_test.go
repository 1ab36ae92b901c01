package steer_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
	"github.com/replyd/replyd/engine/steer/steertest"
)

func words(text string) []string {
	var out []string
	for _, w := range steer.Words(text) {
		out = append(out, w.Text)
	}
	return out
}

func TestWords(t *testing.T) {
	for text, want := range map[string][]string{
		"I'm fine, thanks.":    {"I'm", "fine", "thanks"},
		"a well-known place":   {"a", "well-known", "place"},
		"it’s 3pm":             {"it’s", "3pm"},
		"كَتَبَ الوَلَدُ":      {"كَتَبَ", "الوَلَدُ"},
		"'tis rock--roll' ok-": {"tis", "rock", "roll", "ok"},
		"":                     nil,
		"...":                  nil,
		"Jazz, now!":           {"Jazz", "now"},
		"x-ray's café":         {"x-ray's", "café"},
	} {
		if d := cmp.Diff(want, words(text)); d != "" {
			t.Errorf("Words(%q) (-want +got):\n%s", text, d)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		s   engine.Steer
		err string
	}{
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "bedr", "tea ", ""}}, ""},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"don'"}}, ""},
		{engine.Steer{Mode: engine.SteerWords}, "steer.words must have 1 to 16 entries"},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"a", "b c"}}, "steer.words[1] must be the beginning of one word"},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{" "}}, "steer.words[0] is only a space"},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{strings.Repeat("a", 33)}}, "steer.words[0] has 33 characters; the limit is 32"},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"'a"}}, "steer.words[0] must be the beginning"},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, ""},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: ""}, "steer.prefix must have 1 to 200 characters"},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "  \t"}, "steer.prefix holds no printable characters"},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2, Initial: "c"}, ""},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 3}, "steer.replace.word is 3 but steer.replace.text has 3 words"},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 0, Initial: "ab"}, "steer.replace.initial must be a single letter"},
		{engine.Steer{}, "steer must have exactly one of words, prefix or replace"},
	} {
		err := steer.Validate(c.s)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want nil", c.s, err)
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)):
			t.Errorf("Validate(%+v) = %v, want %q...", c.s, err, c.err)
		}
	}
}

func TestMatches(t *testing.T) {
	w := func(e ...string) engine.Steer { return engine.Steer{Mode: engine.SteerWords, Words: e} }
	for _, c := range []struct {
		s    engine.Steer
		text string
		want bool
	}{
		{w("i", "w", "l", "t"), "I would like tea", true},
		{w("i", "w", "l", "t"), "I would like tea.", true},
		{w("i", "w", "l", "t"), "I would like tea now", false},
		{w("i", "w", "l", "t"), "\"I would like tea\"", false},
		{w("i", "w", "t", "g", "t", "t", "bedr"), "I want to go to the bedroom", true},
		{w("i", "w", "t", "g", "t", "t", "bedr"), "I want to go to the bed", false},
		{w("tea ", ""), "Tea, please!", true},
		{w("tea ", ""), "Teapot please", false},
		{w("i"), "I'm", true},
		{w("im"), "I'm", false},
		{w("i'm "), "I’m", true},
		{w("w"), "well-known", true},
		{w("w", "k"), "well-known", false},
		{w("3"), "3pm", true},
		// A plain letter matches its forms with diacritics; a letter
		// typed with its diacritic matches only itself.
		{w("u"), "Über", true},
		{w("uber "), "über", true},
		{w("ü"), "über", true},
		{w("ü"), "Uber", false},
		{w("e", "c"), "École créée", true},
		{w("n"), "ñandú", true},
		{w("ñ"), "nada", false},
		{w("l", "z"), "Łódź żyje", true},
		{w("и"), "Йти", true},
		{w("й"), "ити", false},
		{w("ا", "ب"), "أنا بخير", true},
		{w("a"), "åka", true},
		{w("å"), "aka", false},
		{w("x", "a"), "x\U000E0101y 😀 ab", true},
		{w("x", "a"), "x😀ab", true},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, "I would like tea", true},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, "I would li", false},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would "}, "I would", false},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would "}, "I wouldn't", false},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would "}, "I would go", true},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2}, "I want toast", true},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2}, "I want Tea", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2}, "I want coffee", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2, Initial: "c"}, "I want coffee", true},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea", Word: 2, Initial: "c"}, "I want hot coffee", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "Ich will Tee", Word: 2, Initial: "a"}, "Ich will Äpfel", true},
		{engine.Steer{Mode: engine.SteerReplace, Text: "Ich will Tee", Word: 2, Initial: "ä"}, "Ich will Apfel", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea.", Word: 1}, "I will tea.", true},
		{engine.Steer{Mode: engine.SteerReplace, Text: "I want tea.", Word: 1}, "I will tea", false},
	} {
		if got := steer.Matches(c.s, c.text); got != c.want {
			t.Errorf("Matches(%+v, %q) = %v, want %v", c.s, c.text, got, c.want)
		}
		p, err := steer.Compile(c.s)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Accepts(c.text); got != c.want {
			t.Errorf("Program(%+v).Accepts(%q) = %v, want %v", c.s, c.text, got, c.want)
		}
	}
}

// TestProgramAgreesWithOracle checks the byte-by-byte Program against
// Matches on the whole text, over random constraints and texts near what
// they match.
func TestProgramAgreesWithOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := 0; i < 5000; i++ {
		s, target := steertest.Random(rng)
		p, err := steer.Compile(s)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", s, err)
		}
		ex := steertest.Example(rng, s)
		if !steer.Matches(s, steer.Clean(ex)) || !p.Accepts(ex) {
			t.Fatalf("example %q of %+v: Matches %v, Accepts %v", ex, s, steer.Matches(s, steer.Clean(ex)), p.Accepts(ex))
		}
		checkLive(t, p, s, ex)
		texts := []string{ex, target}
		for range 10 {
			texts = append(texts, steertest.Mutate(rng, texts[rng.IntN(len(texts))]))
		}
		for _, text := range texts {
			want := steer.Matches(s, steer.Clean(text))
			if got := p.Accepts(text); got != want {
				t.Fatalf("%+v on %q: Accepts %v, oracle %v", s, text, got, want)
			}
			if want {
				accepted++
			}
		}
	}
	t.Logf("%d accepted texts", accepted)
}

// checkLive checks that every beginning of a matching text is live and
// that the Need estimate reaches zero exactly where the reply may end.
func checkLive(t *testing.T, p *steer.Program, s engine.Steer, text string) {
	t.Helper()
	st := steer.State{}
	for i := 0; i < len(text); i++ {
		var ok bool
		st, ok = p.Step(st, text[i])
		if !ok {
			t.Fatalf("%+v: %q refused after %q", s, text[i], text[:i])
		}
		if p.CanEnd(st) && p.Need(st) != 0 {
			t.Fatalf("%+v: after %q CanEnd but Need %d", s, text[:i+1], p.Need(st))
		}
		if p.Complete(st) {
			if !p.CanEnd(st) || !steer.Matches(s, steer.Clean(text[:i+1])) {
				t.Fatalf("%+v: after %q Complete, but CanEnd %v", s, text[:i+1], p.CanEnd(st))
			}
			for c := byte(0x21); c < 0x7f; c++ {
				if _, ok := p.Step(st, c); ok {
					t.Fatalf("%+v: after %q Complete, but %q may follow", s, text[:i+1], c)
				}
			}
		}
		if n, ok := p.FreeWordNeed(st); ok {
			for _, w := range []string{"a", "Zq", "é9", "xyz", "ميم"} {
				next, ok, _ := p.Feed(st, []byte(w))
				if ok && !next.Partial() && p.Need(next) != n {
					t.Fatalf("%+v: after %q FreeWordNeed %d, but Need %d after %q more", s, text[:i+1], n, p.Need(next), w)
				}
			}
		}
		if n := p.Need(st); n > 0 && !progress(p, st, n) {
			t.Fatalf("%+v: after %q (Need %d) no character lowers Need", s, text[:i+1], n)
		}
	}
}

func progress(p *steer.Program, st steer.State, n int) bool {
	for c := byte(' '); c < 0x7f; c++ {
		if next, ok := p.Step(st, c); ok && p.Need(next) < n {
			return true
		}
	}
	return false
}

func TestHeal(t *testing.T) {
	for prefix, want := range map[string]string{
		"I would li": "I would", "I would ": "I", "Hello": "", "Hello, how ar": "Hello, how", "  x  ": "",
	} {
		p, err := steer.Compile(engine.Steer{Mode: engine.SteerPrefix, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Heal(); got != want {
			t.Errorf("Heal of %q = %q, want %q", prefix, got, want)
		}
	}
}

// TestComplete: a reply is complete once nothing but spaces may follow,
// which only a replace's text written to its end is.
func TestComplete(t *testing.T) {
	replace := engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk please.", Word: 2}
	for _, c := range []struct {
		s    engine.Steer
		text string
		want bool
	}{
		{replace, "Tea with mint please.", true},
		{replace, "Tea with mint please. ", true},
		{replace, "Tea with mint please", false},
		{replace, "Tea with mint", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk", Word: 2}, "Tea with mint", false},
		{engine.Steer{Mode: engine.SteerReplace, Text: "Tea with milk", Word: 2}, "Tea with mint ", true},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t"}}, "I want tea", false},
		{engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t"}}, "I want tea.", false},
		{engine.Steer{Mode: engine.SteerPrefix, Prefix: "I would li"}, "I would like tea", false},
	} {
		p, err := steer.Compile(c.s)
		if err != nil {
			t.Fatal(err)
		}
		st, ok, _ := p.Feed(steer.State{}, []byte(c.text))
		if !ok {
			t.Fatalf("%+v refuses %q", c.s, c.text)
		}
		if got := p.Complete(st); got != c.want {
			t.Errorf("%+v after %q: Complete %v, want %v", c.s, c.text, got, c.want)
		}
	}
}
