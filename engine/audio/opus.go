package audio

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/pion/opus"
)

// opusMaxPacket16k is the most samples per channel one Opus packet can hold
// at 16 kHz (120 ms).
const opusMaxPacket16k = SampleRate * 120 / 1000

// opusHead is the part of an Opus identification header (RFC 7845 §5.1)
// replyd needs.
type opusHead struct {
	channels int
	preSkip  int     // samples at 48 kHz to drop from the start
	gain     float32 // linear output gain
}

// parseOpusHead reads an OpusHead packet. Only single-stream layouts (mapping
// family 0, or family 1/255 with one stream of at most two channels) are
// supported; surround recordings are refused.
func parseOpusHead(f Format, p []byte) (opusHead, error) {
	if len(p) < 19 || string(p[:8]) != "OpusHead" {
		return opusHead{}, corrupt(f, "the Opus identification header is missing or truncated")
	}
	if p[8]>>4 != 0 {
		return opusHead{}, unsupported(f, "Opus header version %d is not supported", p[8])
	}
	h := opusHead{
		channels: int(p[9]),
		preSkip:  int(binary.LittleEndian.Uint16(p[10:12])),
	}
	gainQ8 := int16(binary.LittleEndian.Uint16(p[16:18]))
	h.gain = float32(math.Pow(10, float64(gainQ8)/(20*256)))
	family := p[18]
	if h.channels < 1 {
		return opusHead{}, corrupt(f, "the Opus header declares no channels")
	}
	if family != 0 {
		if len(p) < 21+h.channels {
			return opusHead{}, corrupt(f, "the Opus channel mapping table is truncated")
		}
		if streams := p[19]; streams != 1 || h.channels > 2 {
			return opusHead{}, unsupported(f, "multichannel Opus (%d channels in %d streams) is not supported; record mono or stereo", h.channels, streams)
		}
	}
	if h.channels > 2 {
		return opusHead{}, corrupt(f, "Opus mapping family 0 allows at most two channels")
	}
	return h, nil
}

// opusStream decodes the packets of one Opus stream straight to 16 kHz
// (pion/opus resamples SILK with the reference resampler and decimates CELT
// internally) and collects them, bounded by a duration limit.
type opusStream struct {
	f     Format
	head  opusHead
	dec   opus.Decoder
	buf   []float32
	pcm   []float32 // interleaved, head.channels channels
	limit int64     // most frames per channel to collect
	max   time.Duration
}

func newOpusStream(f Format, head opusHead, max time.Duration) (*opusStream, error) {
	dec, err := opus.NewDecoderWithOutput(SampleRate, head.channels)
	if err != nil {
		return nil, unsupported(f, "the Opus channel layout is not supported")
	}
	s := &opusStream{
		f:    f,
		head: head,
		dec:  dec,
		buf:  make([]float32, opusMaxPacket16k*head.channels),
		max:  max,
	}
	// Pre-skip and end trimming happen after decoding, so allow for them
	// here; Decode enforces max exactly on the result.
	s.limit = maxFrames(max, SampleRate) + int64(head.preSkip/3) + opusMaxPacket16k
	return s, nil
}

// packet decodes one Opus packet and appends its samples. Empty packets
// (which some muxers write for gaps) are skipped.
func (s *opusStream) packet(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	n, err := s.dec.DecodeToFloat32(p, s.buf)
	if err != nil {
		return corrupt(s.f, "an Opus packet could not be decoded")
	}
	if int64(len(s.pcm)/s.head.channels+n) > s.limit {
		return tooLong(s.max)
	}
	s.pcm = append(s.pcm, s.buf[:n*s.head.channels]...)
	return nil
}

// frames is the number of frames per channel collected so far.
func (s *opusStream) frames() int {
	return len(s.pcm) / s.head.channels
}

// trimEnd drops the last n frames collected.
func (s *opusStream) trimEnd(n int) {
	s.pcm = s.pcm[:len(s.pcm)-n*s.head.channels]
}

// finish mixes the stream down, drops the pre-skip and, when total48 (the
// stream's length in 48 kHz samples after pre-skip, or -1 when unknown) is
// plausible, trims the end padding.
func (s *opusStream) finish(total48 int64) []float32 {
	mono := downmix(s.pcm, s.head.channels)
	skip := (s.head.preSkip + 1) / 3
	if skip >= len(mono) {
		return mono[:0]
	}
	mono = mono[skip:]
	if total48 >= 0 {
		// Trim only by less than one packet: a larger difference means
		// the granule positions do not start at zero (a cut stream).
		if want := (total48 + 2) / 3; want < int64(len(mono)) && int64(len(mono))-want <= opusMaxPacket16k {
			mono = mono[:want]
		}
	}
	if s.head.gain != 1 {
		for i := range mono {
			mono[i] *= s.head.gain
		}
	}
	return mono
}
