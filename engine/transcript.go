package engine

import "time"

// TranscriptTokenCap is the most text tokens speech-to-text emits for a
// recording with the given length of speech: 32 plus 12 per second of
// speech in each 30-second window (a fast speaker says about 4 words, 5-6
// Whisper tokens, a second; random-weight models always reach the cap).
func TranscriptTokenCap(speech time.Duration) int {
	if speech <= 0 {
		return 0
	}
	const window = 30 * time.Second
	windows := int((speech + window - 1) / window)
	return 32*windows + int(12*speech.Seconds()+0.999)
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
