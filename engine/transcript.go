package engine

import (
	"math"
	"time"
)

// The token cap of speech-to-text: a 30-second window yields at most
// windowTokenBase plus windowTokensPerSecond tokens per second of audio in
// it (engine/whisper's temperature.go says why these numbers). Random-weight
// models always reach it, so it also bounds the transcript's share of the
// language model's prompt.
const (
	windowTokenBase       = 32
	windowTokensPerSecond = 12
	windowLength          = 30 * time.Second
)

// WindowTokenCap is the most text tokens speech-to-text emits for one
// 30-second window holding the given length of audio.
func WindowTokenCap(audio time.Duration) int {
	return windowTokenBase + int(math.Ceil(windowTokensPerSecond*audio.Seconds()))
}

// TranscriptTokenCap is the most text tokens speech-to-text emits for a
// recording of the given length of speech: WindowTokenCap summed over its
// 30-second windows.
func TranscriptTokenCap(speech time.Duration) int {
	n := 0
	for left := speech; left > 0; left -= windowLength {
		n += WindowTokenCap(min(left, windowLength))
	}
	return n
}

// TranscriptReserve is how many language-model prompt tokens to keep free
// for the transcript of a recording with the given length of speech: twice
// TranscriptTokenCap (the language model's tokenizer may split the words
// finer than Whisper's) plus the chat template's markers around a turn.
func TranscriptReserve(speech time.Duration) int {
	if speech <= 0 {
		return 0
	}
	return 2*TranscriptTokenCap(speech) + 16
}
