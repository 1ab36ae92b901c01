package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func captionEnv(t *testing.T) *liveEnv {
	return newLiveEnv(t, func(o *Options) { o.Limits.LiveCaptionEvery = time.Second })
}

// TestLiveCaptions: while the partner speaks, the transcript of the turn's
// audio so far arrives as caption events (each second of turn audio), all
// before end_of_turn; the turn's transcript follows as before.
func TestLiveCaptions(t *testing.T) {
	le := captionEnv(t)
	c := le.open(t, livePayload)
	sendAudio(t, c, pcm(1.2, true))
	names, evs := events(t, c, 2)
	if strings.Join(names, ",") != "speech_start,caption" {
		t.Fatalf("events %v, want a caption after the first second", names)
	}
	var cap1 captionEvent
	if err := json.Unmarshal(evs[1].Data, &cap1); err != nil || !strings.HasPrefix(cap1.Text, "ahead ") || cap1.AudioMS < 1000 || cap1.AudioMS > 1400 {
		t.Errorf("caption %s", evs[1].Data)
	}
	sendAudio(t, c, append(pcm(1, true), pcm(1, false)...))
	var got []string
	for {
		ev := next(t, c)
		got = append(got, ev.Event)
		if ev.Event == "candidates" {
			break
		}
	}
	s := strings.Join(got, ",")
	if !strings.HasSuffix(s, "end_of_turn,transcript,candidates") || strings.Count(s, "caption") > 1 {
		t.Errorf("events %s: want at most one more caption, then the turn's end", s)
	}
}

// TestLiveCaptionGivesWay: a caption pass still running when the partner
// pauses is canceled at once, before the speculative pass starts, and its
// caption is never sent; a session that switched captions off gets none.
func TestLiveCaptionGivesWay(t *testing.T) {
	le := captionEnv(t)
	le.inf.holdAhead = true
	c := le.open(t, livePayload)
	sendAudio(t, c, pcm(1.2, true))
	if ev := next(t, c); ev.Event != "speech_start" {
		t.Fatalf("event %s", ev.Event)
	}
	waitFor(t, func() bool { return len(le.inf.aheadCtxs()) == 1 })
	sendAudio(t, c, pcm(0.3, false))
	// The pause cancels the caption pass; the speculative pass starts.
	waitFor(t, func() bool { a := le.inf.aheadCtxs(); return len(a) == 2 && a[0].Err() != nil && a[1].Err() == nil })
	le.inf.mu.Lock()
	le.inf.holdAhead = false
	le.inf.mu.Unlock()
	// The spec pass is held: resumed speech cancels it, the turn goes on.
	sendAudio(t, c, append(pcm(0.5, true), pcm(1, false)...))
	var got []string
	for {
		ev := next(t, c)
		got = append(got, ev.Event)
		if ev.Event == "caption" {
			// A caption of the resumed speech may come; the canceled
			// one (of the first 1.4 s) never does.
			var cp captionEvent
			_ = json.Unmarshal(ev.Data, &cp)
			if cp.AudioMS <= 1400 {
				t.Errorf("the canceled caption pass's caption was sent: %s", ev.Data)
			}
		}
		if ev.Event == "candidates" {
			break
		}
	}
	if s := strings.Join(got, ","); !strings.HasSuffix(s, "end_of_turn,transcript,candidates") {
		t.Fatalf("events %s", s)
	}

	off := captionEnv(t)
	c = off.open(t, livePayload)
	write(t, c, websocket.MessageText, []byte(`{"type":"captions","enabled":false}`))
	sendAudio(t, c, append(pcm(2.5, true), pcm(1, false)...))
	names, _ := events(t, c, 4)
	if strings.Join(names, ",") != "speech_start,end_of_turn,transcript,candidates" {
		t.Errorf("events %v with captions off", names)
	}
}
