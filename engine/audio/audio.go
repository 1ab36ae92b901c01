package audio

import (
	"bytes"
	"fmt"
	"time"
)

// SampleRate is the rate of the samples Decode returns: 16 kHz, what Whisper
// expects.
const SampleRate = 16000

// Format names a container/codec pair that Detect recognises.
type Format string

// The formats Detect returns.
const (
	FormatWAV      Format = "wav"
	FormatOggOpus  Format = "ogg-opus"
	FormatWebMOpus Format = "webm-opus"
	FormatMP3      Format = "mp3"
	FormatFLAC     Format = "flac"
	FormatM4A      Format = "m4a"
	FormatUnknown  Format = "unknown"
)

// Detect names the format of data from its first bytes; the declared media
// type of an upload plays no part. It never fails: bytes it does not
// recognise are FormatUnknown. Detect looks only at headers, so a file it
// names may still fail to decode.
func Detect(data []byte) Format {
	switch {
	case len(data) >= 12 && string(data[0:4]) == "RIFF" && string(data[8:12]) == "WAVE":
		return FormatWAV
	case bytes.HasPrefix(data, []byte("OggS")):
		if oggIsOpus(data) {
			return FormatOggOpus
		}
		return FormatUnknown
	case bytes.HasPrefix(data, []byte{0x1A, 0x45, 0xDF, 0xA3}):
		return FormatWebMOpus
	case bytes.HasPrefix(data, []byte("fLaC")):
		return FormatFLAC
	case len(data) >= 8 && string(data[4:8]) == "ftyp":
		return FormatM4A
	case bytes.HasPrefix(data, []byte("ID3")):
		// An ID3v2 tag may precede MP3 frames or, rarely, a FLAC stream.
		if rest, ok := skipID3v2(data); ok && bytes.HasPrefix(rest, []byte("fLaC")) {
			return FormatFLAC
		}
		return FormatMP3
	case mp3FrameHeaderAt(data, 0):
		return FormatMP3
	}
	return FormatUnknown
}

// Decoder decodes uploads. Its zero value is ready to use.
type Decoder struct {
	// TempDir is where an M4A file whose index comes last is written for
	// ffmpeg, which cannot read such a file from a pipe; empty means
	// os.TempDir(). replyd points it at a 0700 folder in its data
	// directory (PrepareTempDir), so that no copy of a recording lands in
	// a shared folder, and a crash's leftovers are removed at the next
	// start.
	TempDir string
}

// Decode is Decoder{}.Decode.
func Decode(data []byte, max time.Duration) ([]float32, error) {
	return Decoder{}.Decode(data, max)
}

// Decode detects the format of data, decodes it, mixes its channels down to
// mono (the mean of the channels) and resamples it to 16 kHz (SampleRate).
//
// Recordings longer than max are refused with ErrTooLong before their
// samples are allocated: the duration is checked against the header where the
// format declares it, and streaming decoders stop as soon as they pass max.
// A non-positive max refuses every recording that has samples.
//
// The samples lie in [-1, 1]: NaN and infinities become silence, and peaks
// beyond full scale are clipped.
//
// Every error wraps exactly one of ErrUnsupported, ErrCorrupt, ErrTooLong and
// ErrEmpty, with a message that describes the problem in words safe to show a
// client; it never quotes the uploaded bytes. Decode does not panic on any
// input. It is safe for concurrent use.
//
// Recordings with more than MaxChannels channels or a sample rate above
// MaxRate are refused with ErrUnsupported from their header, before anything
// is allocated for their samples: no speech recording needs them, and they
// only multiply the memory and CPU a request costs.
func (d Decoder) Decode(data []byte, max time.Duration) ([]float32, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: the upload has no bytes", ErrEmpty)
	}
	f := Detect(data)
	var (
		pcm []float32
		err error
	)
	switch f {
	case FormatWAV:
		pcm, err = guard(f, func() ([]float32, error) { return decodeWAV(data, max) })
	case FormatOggOpus:
		pcm, err = guard(f, func() ([]float32, error) { return decodeOggOpus(data, max) })
	case FormatWebMOpus:
		pcm, err = guard(f, func() ([]float32, error) { return decodeWebM(data, max) })
	case FormatMP3:
		pcm, err = guard(f, func() ([]float32, error) { return decodeMP3(data, max) })
	case FormatFLAC:
		pcm, err = guard(f, func() ([]float32, error) { return decodeFLAC(data, max) })
	case FormatM4A:
		pcm, err = decodeM4A(data, max, lookFFmpeg(), d.TempDir)
	default:
		if bytes.HasPrefix(data, []byte("OggS")) {
			return nil, fmt.Errorf("%w: Ogg files are accepted only with the Opus codec (Vorbis and others are not supported)", ErrUnsupported)
		}
		return nil, fmt.Errorf("%w: not a recognised recording; send WAV, Ogg/Opus, WebM/Opus, MP3, FLAC or M4A/AAC", ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	if len(pcm) == 0 {
		return nil, errEmptyFile(f)
	}
	for i, v := range pcm {
		// A damaged or hostile stream must not feed NaN, infinities or
		// absurd magnitudes to Whisper.
		pcm[i] = clamp1(finite(v))
	}
	if int64(len(pcm)) > maxFrames(max, SampleRate) {
		// Resampling can add a sample or two; the source-rate checks are
		// the real limit, this one keeps the contract exact.
		return nil, tooLong(max)
	}
	return pcm, nil
}

// guard runs a decoder that relies on third-party code and turns a panic in
// it into ErrCorrupt, so that hostile bytes cannot crash the server.
func guard(f Format, fn func() ([]float32, error)) (pcm []float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			pcm, err = nil, fmt.Errorf("%w: the %s data is malformed", ErrCorrupt, f)
		}
	}()
	return fn()
}

// maxFrames is the largest number of frames at rate that fits in max.
func maxFrames(max time.Duration, rate int) int64 {
	if max <= 0 || rate <= 0 {
		return 0
	}
	sec := int64(max / time.Second)
	frac := int64(max % time.Second)
	r := int64(rate)
	if sec > (1<<62)/r {
		return 1 << 62
	}
	return sec*r + frac*r/int64(time.Second)
}

// tooLong is the ErrTooLong error for a limit of max.
func tooLong(max time.Duration) error {
	return fmt.Errorf("%w: the recording is longer than the %s allowed", ErrTooLong, max)
}

// corrupt wraps ErrCorrupt with a message about format f.
func corrupt(f Format, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, f, fmt.Sprintf(format, args...))
}

// unsupported wraps ErrUnsupported with a message about format f.
func unsupported(f Format, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrUnsupported, f, fmt.Sprintf(format, args...))
}

// clamp1 clips v to [-1, 1].
func clamp1(v float32) float32 {
	if v > 1 {
		return 1
	}
	if v < -1 {
		return -1
	}
	return v
}

// downmix returns the mean of the ch interleaved channels of in, written over
// in's own storage.
func downmix(in []float32, ch int) []float32 {
	if ch <= 1 {
		return in
	}
	n := len(in) / ch
	inv := 1 / float32(ch)
	for i := 0; i < n; i++ {
		var s float32
		for _, v := range in[i*ch : i*ch+ch] {
			s += v
		}
		in[i] = s * inv
	}
	return in[:n]
}
