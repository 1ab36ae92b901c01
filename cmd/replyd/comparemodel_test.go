package main

import (
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/models"
)

// TestCompareScoring: the rules docs/models.md states for one replay: exact
// after normalizing, near within one word, keystrokes by score.Edited, a
// steered replay's actions as replyd eval --steer counts them, and the
// tally's rates and means.
func TestCompareScoring(t *testing.T) {
	const reply = "I'd like some tea, please."
	cands := []engine.Candidate{{Text: "No thanks."}, {Text: "I'd like tea please"}}
	if !nearHit(cands, reply) {
		t.Error("one word dropped is not near")
	}
	if nearHit([]engine.Candidate{{Text: "I'd like coffee please"}}, reply) {
		t.Error("one word changed and one dropped is near")
	}
	var tl compareTally
	for i, cs := range [][]string{{"No thanks.", "i'd like some tea please"}, {"No thanks.", "I'd like tea please"}} {
		tl.add(scoreDialog(cs, reply))
		tl.turns++
		if nearHit([]engine.Candidate{{Text: cs[0]}, {Text: cs[1]}}, reply) {
			tl.near++
		}
		tl.turnTime += time.Duration(i+1) * 10 * time.Millisecond
		tl.genTokens, tl.genCnt = tl.genTokens+30, tl.genCnt+2
	}
	// Steered: "iwlt"-like keys 4; a hit costs one selection more, a miss
	// the reply typed whole.
	chars, actions, hit := steeredActions([]string{"I would like tea"}, "I would like tea.", 4)
	if chars != 17 || actions != 5 || !hit {
		t.Errorf("steered hit: %d chars, %d actions, %v", chars, actions, hit)
	}
	tl.steered, tl.sChars, tl.sActions, tl.hits = 1, chars, actions, 1
	chars, actions, hit = steeredActions([]string{"I want water"}, "I would like tea.", 4)
	if chars != 17 || actions != 21 || hit {
		t.Errorf("steered miss: %d chars, %d actions, %v", chars, actions, hit)
	}
	tl.steered, tl.sChars, tl.sActions = 2, tl.sChars+chars, tl.sActions+actions
	f := tl.figures()
	// The reply has 26 characters. Turn 1's best candidate is 3 edits
	// away (the case of "i", the comma, the full stop): 26-3-1 = 22 saved;
	// turn 2's is 7 ("some ", the comma, the full stop): 26-7-1 = 18.
	want := models.CompareFigures{Turns: 2, ExactRate: 0.5, Top1Rate: 0, NearRate: 1,
		KeystrokesSaved: 40, KeystrokesTyped: 52, KeystrokeSaving: round3(40.0 / 52),
		SteeredTurns: 2, SteeredHits: 1, SteeredKSR: round3(float64(34-26) / 34), TurnMS: 15, ReplyTokens: 15}
	if f != want {
		t.Errorf("figures\n got %+v\nwant %+v", f, want)
	}
}
