package vad

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/shareddata"
)

// turnEvents streams pcm through a TurnDetector on the real Silero model in
// chunks of 100 ms (what the page sends) and returns the events, with the
// second each happened at, as "start@1.2 pause@2.3 ...".
func turnEvents(t *testing.T, pcm []float32, cfg engine.TurnConfig) (string, []engine.TurnEvent) {
	t.Helper()
	d := engine.NewTurnDetector(NewDetector(model(t)).NewVoiceStream(), cfg)
	var log []string
	var evs []engine.TurnEvent
	fed := 0
	name := map[engine.TurnEventKind]string{engine.TurnStart: "start", engine.TurnPause: "pause", engine.TurnResume: "resume", engine.TurnEnd: "end"}
	emit := func(e engine.TurnEvent) {
		log = append(log, fmt.Sprintf("%s@%.1f", name[e.Kind], float64(fed)/SampleRate))
		evs = append(evs, e)
	}
	maxHeld := 0
	for len(pcm) > 0 {
		n := min(1600, len(pcm))
		fed += n
		d.Push(pcm[:n], emit)
		pcm = pcm[n:]
		maxHeld = max(maxHeld, d.Held())
	}
	d.Flush(emit)
	if lim := int(d.Config().MaxTurn/time.Second)*SampleRate + 2*WindowSamples; maxHeld > lim {
		t.Errorf("held %d samples, over the bound %d", maxHeld, lim)
	}
	return strings.Join(log, " "), evs
}

// TestTurnEndsAfterSilence: one spoken question then silence is one turn:
// it starts, pauses at the short pause, ends at 500 ms, and the turn's
// audio holds the question.
func TestTurnEndsAfterSilence(t *testing.T) {
	q := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.5, 1.5, 0)
	log, evs := turnEvents(t, q, engine.TurnConfig{})
	kinds := []engine.TurnEventKind{}
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]engine.TurnEventKind{engine.TurnStart, engine.TurnPause, engine.TurnEnd}) {
		t.Fatalf("events %s, want start, pause, end", log)
	}
	end := evs[2]
	if end.Fresh {
		t.Error("the turn ended with no speech since its pause, yet Fresh")
	}
	vb := voiceBounds(q)
	got := float64(len(end.PCM)) / SampleRate
	if voice := vb[1] - vb[0]; got < voice || got > voice+1.2 {
		t.Errorf("the turn holds %.2f s of audio; the voice lasts %.2f s", got, voice)
	}
	// The end comes EndSilence after the voice (within the VAD's lag).
	var at float64
	fmt.Sscanf(log[strings.LastIndex(log, "@")+1:], "%g", &at)
	if at < vb[1]+0.4 || at > vb[1]+1.1 {
		t.Errorf("the turn ended at %.1f s (%s); the voice ends at %.2f s", at, log, vb[1])
	}
}

// TestTurnPauseThenResume: a short pause between two sentences pauses the
// turn (a speculative pass would start) and resumes it (that pass is
// dropped): still one turn, which pauses again after the second sentence;
// its end is not Fresh, since that last pause's pass heard all of it.
func TestTurnPauseThenResume(t *testing.T) {
	a := shareddata.Speak(t, "Good morning.", "en-us", 0.5, 0, 0)
	b := shareddata.Speak(t, "How are you feeling today?", "en-us", 0, 1.5, 0)
	// Exactly 400 ms between the two voices.
	ab, bb := voiceBounds(a), voiceBounds(b)
	pcm := append(a[:int(ab[1]*SampleRate)+1], silence(0.4)...)
	pcm = append(pcm, b[int(bb[0]*SampleRate):]...)
	log, evs := turnEvents(t, pcm, engine.TurnConfig{EndSilence: 700 * time.Millisecond})
	var kinds []engine.TurnEventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	want := []engine.TurnEventKind{engine.TurnStart, engine.TurnPause, engine.TurnResume, engine.TurnPause, engine.TurnEnd}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events %s: want start, pause, resume, pause, end", log)
	}
	if evs[4].Fresh || len(evs[1].PCM) >= len(evs[3].PCM) || len(evs[3].PCM) > len(evs[4].PCM) {
		t.Errorf("fresh %v; audio at the pauses %d, %d and the end %d samples", evs[4].Fresh, len(evs[1].PCM), len(evs[3].PCM), len(evs[4].PCM))
	}
}

// TestNoTurnWithoutSpeech: silence, broadband noise, hum and music-like
// tones start no turn, and hold no more than the pre-roll.
func TestNoTurnWithoutSpeech(t *testing.T) {
	hum := make([]float32, 5*SampleRate)
	for i := range hum {
		hum[i] = float32(0.1*math.Sin(2*3.14159265*50*float64(i)/SampleRate) + 0.05*math.Sin(2*3.14159265*100*float64(i)/SampleRate))
	}
	for name, pcm := range map[string][]float32{
		"silence": silence(5), "white-noise": whiteNoise(5, 0.1), "hum": hum, "tones": tones(5),
	} {
		d := engine.NewTurnDetector(NewDetector(model(t)).NewVoiceStream(), engine.TurnConfig{})
		var evs []engine.TurnEvent
		emit := func(e engine.TurnEvent) { evs = append(evs, e) }
		for i := 0; i < len(pcm); i += 1600 {
			d.Push(pcm[i:min(i+1600, len(pcm))], emit)
			// The pre-roll, and at most a candidate that MinSpeech or
			// EndSilence has not decided yet: never a turn's worth.
			if held := d.Held(); held > SampleRate {
				t.Errorf("%s: holds %d samples with no turn", name, held)
			}
		}
		d.Flush(emit)
		if len(evs) != 0 {
			t.Errorf("%s: %d turn events, want none", name, len(evs))
		}
	}
}

// TestVoicedEndsWithTheVoice: the detector's count of voiced windows stops
// growing within a few windows of the voice's end (Silero's lag), and does
// not grow in the silence after it: a live session times the work of a
// turn from the arrival of the last voiced window.
func TestVoicedEndsWithTheVoice(t *testing.T) {
	q := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0.5, 1.5, 0)
	d := engine.NewTurnDetector(NewDetector(model(t)).NewVoiceStream(), engine.TurnConfig{})
	last := 0 // samples fed when Voiced last grew, one window at a time
	for i := 0; i < len(q); i += WindowSamples {
		before := d.Voiced()
		d.Push(q[i:min(i+WindowSamples, len(q))], func(engine.TurnEvent) {})
		if d.Voiced() > before {
			last = min(i+WindowSamples, len(q))
		}
	}
	if d.Voiced() == 0 {
		t.Fatal("no voiced window in a spoken question")
	}
	vb := voiceBounds(q)
	lastAt := float64(last) / SampleRate
	if lastAt < vb[1] || lastAt > vb[1]+0.25 {
		t.Errorf("the last voiced window ends at %.3f s; the voice ends at %.3f s", lastAt, vb[1])
	}
	t.Logf("last voiced window ends %.0f ms after the voice", (lastAt-vb[1])*1000)
}

// TestTurnProbsKeepTheStreamsSpeech: a turn's events carry one speech
// probability per window of its audio, the stream's own; kept by them, a
// recording streamed from its start gives exactly what KeepSpeech gives
// on the whole recording. And jfk.wav's first 5 s, whose pause ends a
// turn after "And so, my fellow Americans", has a second turn, "ask not
// what your country", which the stream hears as speech: kept by the
// stream's probabilities it holds that speech. Kept by a detector started
// afresh on the turn's audio it held none, and the partner's words were
// answered as no speech (benchlatency -live found it).
func TestTurnProbsKeepTheStreamsSpeech(t *testing.T) {
	d := NewDetector(model(t))
	q := shareddata.Speak(t, "Would you like a cup of tea with your lunch today?", "en-us", 0, 1.5, 0)
	q = q[:len(q)/WindowSamples*WindowSamples]
	_, evs := turnEvents(t, q, engine.TurnConfig{PreRoll: 10 * time.Second, EndSilence: time.Second})
	if len(evs) == 0 || evs[len(evs)-1].Kind != engine.TurnEnd {
		t.Fatalf("no turn in the question: %d events", len(evs))
	}
	for _, e := range evs {
		if (e.Kind == engine.TurnPause || e.Kind == engine.TurnEnd) && len(e.Probs) != len(e.PCM)/WindowSamples {
			t.Fatalf("event %d: %d probabilities for %d samples", e.Kind, len(e.Probs), len(e.PCM))
		}
	}
	end := evs[len(evs)-1]
	// The pre-roll reached back to the first sample: the turn's audio is
	// the recording's start, its probabilities the model's from zero.
	want, err := d.KeepSpeech(context.Background(), end.PCM)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.KeepSpeechByProbs(end.PCM, end.Probs); got.Segments != want.Segments || !slices.Equal(got.PCM, want.PCM) {
		t.Errorf("by the stream's probabilities: %d segments, %d samples; KeepSpeech: %d, %d", got.Segments, len(got.PCM), want.Segments, len(want.PCM))
	}

	jfk := shareddata.JFK(t)
	log, evs := turnEvents(t, append(jfk[:5*SampleRate:5*SampleRate], silence(1)...), engine.TurnConfig{})
	var ends []engine.TurnEvent
	for _, e := range evs {
		if e.Kind == engine.TurnEnd {
			ends = append(ends, e)
		}
	}
	if len(ends) != 2 {
		t.Fatalf("events %s: want two turns", log)
	}
	second := d.KeepSpeechByProbs(ends[1].PCM, ends[1].Probs)
	if s := float64(len(second.PCM)) / SampleRate; s < 0.5 {
		t.Errorf("the second turn (%.2f s of audio) keeps %.2f s of speech by the stream's probabilities", float64(len(ends[1].PCM))/SampleRate, s)
	}
}
