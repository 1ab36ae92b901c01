package vad

import "math"

// Params are whisper.cpp's VAD parameters (struct whisper_vad_params).
type Params struct {
	Threshold      float32 // speech when a window's probability is at least this
	MinSpeechMs    int     // shorter speech is dropped
	MinSilenceMs   int     // a pause must last this long to end a segment
	MaxSpeechS     float32 // longer segments are split; above 100000 means no limit
	SpeechPadMs    int     // padding added around each segment
	SamplesOverlap float32 // seconds of audio kept after each segment but the last when joining
}

// DefaultParams returns whisper.cpp's defaults (whisper_vad_default_params
// in src/whisper.cpp): threshold 0.5, minimum speech 250 ms, minimum silence
// 100 ms, no maximum, 30 ms padding, 0.1 s overlap.
func DefaultParams() Params {
	return Params{Threshold: 0.5, MinSpeechMs: 250, MinSilenceMs: 100, MaxSpeechS: math.MaxFloat32, SpeechPadMs: 30,
		SamplesOverlap: 0.1}
}

// Segment is a stretch of speech in centiseconds from the start of the
// recording, as whisper.cpp reports it (whisper_vad_segment).
type Segment struct {
	Start, End int64
}

// samplesToCs and csToSamples are whisper.cpp's conversions (samples_to_cs,
// cs_to_samples), rounding half up.
func samplesToCs(n int) int64  { return int64(float64(n)/SampleRate*100 + 0.5) }
func csToSamples(cs int64) int { return int(float64(cs)/100*SampleRate + 0.5) }

// Segments turns per-window speech probabilities into speech segments the
// way whisper_vad_segments_from_probs (src/whisper.cpp) does: a segment
// starts at a window whose probability reaches the threshold, ends once the
// probability has stayed below threshold-0.15 for the minimum silence,
// and is kept when longer than the minimum speech; segments closer than
// 200 ms are merged; each is padded by SpeechPadMs (splitting the gap when
// two are closer than twice the padding).
func Segments(probs []float32, p Params) []Segment {
	type span struct{ start, end int }
	n := len(probs)
	const window = WindowSamples
	minSilence := SampleRate * p.MinSilenceMs / 1000
	audioLen := n * window
	minSpeech := SampleRate * p.MinSpeechMs / 1000
	pad := SampleRate * p.SpeechPadMs / 1000
	maxSpeech := math.MaxInt32 / 2
	if p.MaxSpeechS <= 100000 {
		t := int64(SampleRate)*int64(p.MaxSpeechS) - window - 2*int64(pad)
		if t > 0 && t <= math.MaxInt32 {
			maxSpeech = int(t)
		}
	}
	// A silence this long marks where an over-long segment may be split
	// (98 ms, from the Silero reference implementation).
	minSilenceAtMax := SampleRate * 98 / 1000
	neg := max(p.Threshold-0.15, 0.01)

	var speeches []span
	inSpeech, hasCur := false, false
	tempEnd, prevEnd, nextStart, curStart := 0, 0, 0, 0
	for i, prob := range probs {
		cur := window * i
		if prob >= p.Threshold && tempEnd != 0 {
			tempEnd = 0
			if nextStart < prevEnd {
				nextStart = cur
			}
		}
		if prob >= p.Threshold && !inSpeech {
			inSpeech, hasCur, curStart = true, true, cur
			continue
		}
		if inSpeech && cur-curStart > maxSpeech {
			if prevEnd != 0 {
				speeches = append(speeches, span{curStart, prevEnd})
				hasCur = true
				if nextStart < prevEnd {
					inSpeech, hasCur = false, false
				} else {
					curStart = nextStart
				}
				prevEnd, nextStart, tempEnd = 0, 0, 0
			} else {
				speeches = append(speeches, span{curStart, cur})
				prevEnd, nextStart, tempEnd = 0, 0, 0
				inSpeech, hasCur = false, false
				continue
			}
		}
		if prob < neg && inSpeech {
			if tempEnd == 0 {
				tempEnd = cur
			}
			if cur-tempEnd > minSilenceAtMax {
				prevEnd = tempEnd
			}
			if cur-tempEnd < minSilence {
				continue
			}
			if tempEnd-curStart > minSpeech {
				speeches = append(speeches, span{curStart, tempEnd})
			}
			prevEnd, nextStart, tempEnd = 0, 0, 0
			inSpeech, hasCur = false, false
		}
	}
	if hasCur && audioLen-curStart > minSpeech {
		speeches = append(speeches, span{curStart, audioLen})
	}
	// Merge segments less than 200 ms apart.
	for i := 0; i+1 < len(speeches); i++ {
		if speeches[i+1].start-speeches[i].end < SampleRate*200/1000 {
			speeches[i].end = speeches[i+1].end
			speeches = append(speeches[:i+1], speeches[i+2:]...)
			i--
		}
	}
	// Drop what is still shorter than the minimum speech.
	kept := speeches[:0]
	for _, s := range speeches {
		if s.end-s.start >= minSpeech {
			kept = append(kept, s)
		}
	}
	speeches = kept
	out := make([]Segment, len(speeches))
	for i := range speeches {
		if i == 0 {
			speeches[i].start = max(speeches[i].start-pad, 0)
		}
		if i < len(speeches)-1 {
			gap := speeches[i+1].start - speeches[i].end
			if gap < 2*pad {
				speeches[i].end += gap / 2
				speeches[i+1].start = max(speeches[i+1].start-gap/2, 0)
			} else {
				speeches[i].end = min(speeches[i].end+pad, audioLen)
				speeches[i+1].start = max(speeches[i+1].start-pad, 0)
			}
		} else {
			speeches[i].end = min(speeches[i].end+pad, audioLen)
		}
		out[i] = Segment{Start: samplesToCs(speeches[i].start), End: samplesToCs(speeches[i].end)}
	}
	return out
}

// Join returns the samples of pcm inside segs, as whisper_vad (src/whisper.cpp)
// builds the audio it transcribes: each segment, extended by SamplesOverlap
// seconds except the last, and 0.1 s of silence between segments. No
// segments give nil.
func Join(pcm []float32, segs []Segment, p Params) []float32 {
	if len(segs) == 0 || len(pcm) == 0 {
		return nil
	}
	overlap := int(p.SamplesOverlap * SampleRate)
	silence := int(0.1 * SampleRate)
	n := len(pcm)
	var out []float32
	for i, s := range segs {
		start := min(csToSamples(s.Start), n-1)
		end := min(csToSamples(s.End), n-1)
		if i < len(segs)-1 {
			end = min(end+overlap, n-1)
		}
		if end <= start {
			continue
		}
		out = append(out, pcm[start:end]...)
		if i < len(segs)-1 {
			out = append(out, make([]float32, silence)...)
		}
	}
	return out
}
