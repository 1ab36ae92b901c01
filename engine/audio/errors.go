// Package audio decodes the recordings tablets upload (WAV, Ogg/Opus,
// WebM/Opus, MP3, FLAC, and M4A/AAC through ffmpeg when installed) into 16 kHz
// mono float32 samples for Whisper. The format is detected from the bytes,
// never from the declared media type. It is pure Go.
package audio

import "errors"

// Errors returned by Decode, tested with errors.Is. The wrapped message says
// what was wrong in words a client developer can act on.
var (
	// ErrUnsupported: the bytes are not a format replyd can decode.
	ErrUnsupported = errors.New("unsupported audio format")
	// ErrCorrupt: the format was recognised but the data is broken or truncated.
	ErrCorrupt = errors.New("corrupt audio")
	// ErrTooLong: the recording is longer than the allowed duration.
	ErrTooLong = errors.New("audio too long")
	// ErrEmpty: there are no bytes or no samples.
	ErrEmpty = errors.New("empty audio")
)
