package steer

import (
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
)

// TestSims checks what each simulated user types for a reply.
func TestSims(t *testing.T) {
	for _, c := range []struct {
		mode, reply string
		want        engine.Steer
		keys        int
	}{
		{"initials", "I would like tea.", engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "l", "t"}}, 4},
		{"words", "I want to go to the bedroom", engine.Steer{Mode: engine.SteerWords, Words: []string{"i", "w", "t", "g", "t", "t", "bedroom"}}, 6 + 7 + 1},
		{"prefix:5", "I would like tea", engine.Steer{Mode: engine.SteerPrefix, Prefix: "I wou"}, 5},
		{"replace", "I want coffee", engine.Steer{Mode: engine.SteerReplace, Text: "I want cqxj", Word: 2}, 1},
	} {
		sim, err := ParseSim(c.mode)
		if err != nil {
			t.Fatal(err)
		}
		s, keys, ok := sim.Make(c.reply)
		if !ok || keys != c.keys || s.Mode != c.want.Mode || strings.Join(s.Words, ",") != strings.Join(c.want.Words, ",") ||
			s.Prefix != c.want.Prefix || s.Text != c.want.Text || s.Word != c.want.Word {
			t.Errorf("%s of %q: %+v, %d keys, ok %v; want %+v, %d keys", c.mode, c.reply, s, keys, ok, c.want, c.keys)
		}
		if c.mode != "replace" && !Matches(s, Clean(c.reply)) {
			t.Errorf("%s: the true reply %q does not meet %+v", c.mode, c.reply, s)
		}
	}
	for _, bad := range []string{"prefix:0", "prefix:x", "spell"} {
		if _, err := ParseSim(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, _, ok := mustSim(t, "prefix:5").Make("I am"); ok {
		t.Error("prefix:5 of a 4-character reply is steerable")
	}
}

func mustSim(t *testing.T, v string) Sim {
	t.Helper()
	s, err := ParseSim(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
