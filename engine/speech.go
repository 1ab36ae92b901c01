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

// SpeechByProbs is a SpeechFilter that can keep the speech of samples
// whose speech probabilities are already known, one per VoiceWindow
// samples from the first (a live turn's, TurnEvent.Probs): it joins the
// same segments without running voice detection again. A live turn's
// probabilities come from the stream's detector, whose state carries the
// conversation before the turn; a detector started afresh on the turn's
// audio alone can hear less (jfk.wav's "ask not", after a pause, held
// probabilities of 0.45-0.85 in the stream and none above 0.5 afresh).
type SpeechByProbs interface {
	KeepSpeechByProbs(pcm, probs []float32) Speech
}

// KeepByProbs keeps pcm's speech by probs when f is a SpeechByProbs and
// probs hold one probability for each whole window of pcm; ok is false
// otherwise (the speech must then be detected).
func KeepByProbs(f any, pcm, probs []float32) (sp Speech, ok bool) {
	bp, ok := f.(SpeechByProbs)
	if !ok || probs == nil || len(probs) != len(pcm)/VoiceWindow {
		return Speech{}, false
	}
	return bp.KeepSpeechByProbs(pcm, probs), true
}
