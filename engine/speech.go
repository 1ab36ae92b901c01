package engine

import "context"

// Speech is what a SpeechFilter kept of a recording.
type Speech struct {
	// PCM holds the speech, joined as whisper.cpp joins its VAD segments;
	// empty when the recording holds no speech.
	PCM []float32
	// Segments is the number of speech segments found.
	Segments int
}

// SpeechFilter finds the speech in 16 kHz mono samples (voice activity
// detection). Implementations must be safe for concurrent use.
type SpeechFilter interface {
	KeepSpeech(ctx context.Context, pcm []float32) (Speech, error)
}
