package engine

import (
	"errors"

	"github.com/replyd/replyd/engine/audio"
)

// classifyAudioErr maps engine/audio's sentinels to pipeline kinds. The audio
// package's messages describe the format problem and carry no dialog content,
// so they are shown to the client.
func classifyAudioErr(err error) error {
	switch {
	case isContextErr(err):
		return &Error{Kind: KindCanceled, Message: "the request was canceled or timed out", Err: err}
	case errors.Is(err, audio.ErrTooLong):
		return &Error{Kind: KindAudioTooLong, Message: err.Error(), Err: err}
	case errors.Is(err, audio.ErrEmpty):
		return &Error{Kind: KindBadAudio, Message: err.Error(), Err: err}
	case errors.Is(err, audio.ErrUnsupported), errors.Is(err, audio.ErrCorrupt):
		return &Error{Kind: KindUnsupportedAudio, Message: err.Error(), Err: err}
	default:
		return &Error{Kind: KindUnsupportedAudio, Message: "the audio could not be decoded", Err: err}
	}
}
