package vad

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/replyd/replyd/internal/shareddata"
)

// BenchmarkProbs: Silero on 10 s of speech-like audio, on one core and on
// all; the figure to compare is ns/op against 10 s of audio.
func BenchmarkProbs(b *testing.B) {
	m, err := Load(shareddata.VADModel(b))
	if err != nil {
		b.Fatal(err)
	}
	pcm := tones(10)
	for _, procs := range []int{1, runtime.NumCPU()} {
		b.Run("procs="+strconv.Itoa(procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for b.Loop() {
				m.Probs(pcm)
			}
		})
	}
}

// BenchmarkLiveStream is the cost of live listening's voice detection:
// one 32 ms window through a stream, as a live session runs it per window
// of the partner's audio (b.N windows; ns/op ÷ 32 ms is the share of one
// core a session takes).
func BenchmarkLiveStream(b *testing.B) {
	m, err := Load(shareddata.VADModel(b))
	if err != nil {
		b.Fatal(err)
	}
	vs := NewDetector(m).NewVoiceStream()
	pcm := tones(1)
	i := 0
	for b.Loop() {
		vs.Prob(pcm[i : i+WindowSamples])
		i = (i + WindowSamples) % (len(pcm) - WindowSamples)
	}
}
