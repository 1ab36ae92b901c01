package vad

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// probs builds per-window probabilities from runs of (windows, value).
func probs(runs ...float64) []float32 {
	var out []float32
	for i := 0; i+1 < len(runs); i += 2 {
		for range int(runs[i]) {
			out = append(out, float32(runs[i+1]))
		}
	}
	return out
}

// Window i starts at sample 512·i = 3.2·i centiseconds.
func TestSegmentsRules(t *testing.T) {
	p := DefaultParams()
	for _, tc := range []struct {
		name  string
		probs []float32
		want  []Segment
	}{
		{"none", probs(50, 0.1), []Segment{}},
		// Speech from window 10 to 30 (0.64 s), silence after: the end is
		// where the silence began, padded by 30 ms.
		{"one", probs(10, 0.1, 20, 0.9, 20, 0.1), []Segment{{Start: 32 - 3, End: 96 + 3}}},
		// 5 windows (160 ms) of speech are under the 250 ms minimum.
		{"too short", probs(10, 0.1, 5, 0.9, 20, 0.1), []Segment{}},
		// A dip between threshold-0.15 and the threshold does not end speech.
		{"dip", probs(10, 0.1, 10, 0.9, 10, 0.4, 10, 0.9, 20, 0.1), []Segment{{Start: 29, End: 131}}},
		// Pauses of 2 windows (64 ms) are shorter than the 100 ms minimum silence.
		{"short pause", probs(10, 0.1, 10, 0.9, 2, 0.1, 10, 0.9, 20, 0.1), []Segment{{Start: 29, End: 105}}},
		// A pause of 5 windows (160 ms) ends a segment, but gaps under 200 ms are merged.
		{"merged", probs(10, 0.1, 10, 0.9, 5, 0.1, 10, 0.9, 20, 0.1), []Segment{{Start: 29, End: 115}}},
		// A pause of 20 windows (640 ms): two segments, each padded.
		{"two", probs(10, 0.1, 10, 0.9, 20, 0.1, 10, 0.9, 20, 0.1), []Segment{{Start: 29, End: 67}, {Start: 125, End: 163}}},
		// Speech to the end: the segment ends with the audio.
		{"to the end", probs(10, 0.1, 20, 0.9), []Segment{{Start: 29, End: 96}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Segments(tc.probs, p)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("segments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	pcm := make([]float32, 5*SampleRate)
	for i := range pcm {
		pcm[i] = float32(i)
	}
	p := DefaultParams()
	segs := []Segment{{Start: 50, End: 100}, {Start: 300, End: 400}}
	got := Join(pcm, segs, p)
	// [0.5 s, 1.0 s + 0.1 s overlap) ‖ 0.1 s silence ‖ [3.0 s, 4.0 s).
	want := append([]float32(nil), pcm[8000:17600]...)
	want = append(want, make([]float32, 1600)...)
	want = append(want, pcm[48000:64000]...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("joined (-want +got):\n%s", diff)
	}
	if Join(pcm, nil, p) != nil {
		t.Fatal("no segments kept samples")
	}
	// The end is clamped to the recording, as whisper.cpp clamps it.
	if got := Join(pcm[:1000], []Segment{{Start: 0, End: 100}}, p); len(got) != 999 {
		t.Fatalf("kept %d samples of 1000", len(got))
	}
}
