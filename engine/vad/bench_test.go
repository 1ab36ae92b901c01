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
