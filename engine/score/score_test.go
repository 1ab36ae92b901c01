package score

import (
	"math"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
		{"flaw", "lawn", 2},
		{"Yes please", "Yes please", 0},
		{"Tee", "Tée", 1}, // one character, two bytes
		{"über", "uber", 1},
	} {
		if got := EditDistance(c.a, c.b); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := EditDistance(c.b, c.a); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d (symmetry)", c.b, c.a, got, c.want)
		}
	}
}

// TestKeystrokes follows issue 12's arithmetic: as it was, length - 1; edited,
// final length - edit distance - 1, never below 0.
func TestKeystrokes(t *testing.T) {
	if got := SpokenAsIs("Yes please."); got != 10 {
		t.Errorf("SpokenAsIs = %d, want 10", got)
	}
	if got := SpokenAsIs(""); got != 0 {
		t.Errorf("SpokenAsIs(empty) = %d, want 0", got)
	}
	// "Yes please." -> "Yes please, with milk." : 22 chars, distance 11.
	if got := Edited("Yes please.", "Yes please, with milk."); got != 22-11-1 {
		t.Errorf("Edited = %d, want %d", got, 22-11-1)
	}
	if got := Edited("Yes please.", "Yes please."); got != SpokenAsIs("Yes please.") {
		t.Errorf("Edited(s, s) = %d, want SpokenAsIs(s)", got)
	}
	if got := Edited("Completely different words", "No"); got != 0 {
		t.Errorf("Edited of an unrelated reply = %d, want 0", got)
	}
	if got := Edited("Grüße", "Grüße!"); got != 6-1-1 {
		t.Errorf("Edited counts bytes, not characters: %d", got)
	}
}

func TestNormalizeAndF1(t *testing.T) {
	if got := Normalize("  Yes, please!  I'd LOVE some… tea. "); got != "yes please id love some tea" {
		t.Errorf("Normalize = %q", got)
	}
	if Normalize("Yes please") != Normalize("yes, PLEASE!") {
		t.Error("case and punctuation should not matter")
	}
	for _, c := range []struct {
		cand, ref string
		want      float64
	}{
		{"yes please", "Yes, please.", 1},
		{"no thanks", "yes please", 0},
		{"yes thank you", "yes please", 2 * (1.0 / 3) * 0.5 / (1.0/3 + 0.5)},
		{"", "", 1},
		{"", "yes", 0},
		{"the the", "the", 2 * 0.5 * 1 / 1.5},
	} {
		if got := TokenF1(c.cand, c.ref); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("TokenF1(%q, %q) = %v, want %v", c.cand, c.ref, got, c.want)
		}
	}
}

func TestWordEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "yes please", 2},
		{"Yes, please!", "yes please", 0},
		{"I'd like tea", "I'd like some tea", 1},
		{"I'd like tea", "I'd love tea", 1},
		{"I'd like tea", "no thanks", 3},
		{"see you later", "later see you", 2},
	} {
		if got := WordEditDistance(c.a, c.b); got != c.want {
			t.Errorf("WordEditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := WordEditDistance(c.b, c.a); got != c.want {
			t.Errorf("WordEditDistance(%q, %q) = %d, want %d (symmetry)", c.b, c.a, got, c.want)
		}
	}
}

// TestRank: exact after Normalize at rank 1 and any rank, the best F1, the
// keystrokes by Edited, summed and turned into rates.
func TestRank(t *testing.T) {
	const reply = "I'd like some tea, please."
	var sum Ranking
	for _, cs := range [][]string{{"No thanks.", "i'd like some tea please"}, {"No thanks.", "I'd like tea please"}, {"I'd like some tea please!"}} {
		sum.Add(Rank(cs, reply))
	}
	// 26 characters a reply; the best candidates are 3, 7 and 2 edits
	// away: 22 + 18 + 23 saved.
	if sum.Top1 != 1 || sum.TopN != 2 || sum.Saved != 63 || sum.Typed != 78 {
		t.Errorf("ranking %+v", sum)
	}
	top1, topN, f1, saving := sum.Rates(3)
	if top1 != 1.0/3 || topN != 2.0/3 || f1 <= 0 || f1 > 1 || saving != 63.0/78 {
		t.Errorf("rates %v %v %v %v", top1, topN, f1, saving)
	}
	if a, b, c, d := (Ranking{}).Rates(0); a != 0 || b != 0 || c != 0 || d != 0 {
		t.Error("no turns has rates")
	}
}
