package audio

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Recordings outside these bounds are refused for every format, from the
// header, before their samples are allocated: no speech recording needs
// them, and they only multiply the memory and CPU one request costs.
const (
	minRate = 1000
	// MaxRate is the highest sample rate accepted, in Hz.
	MaxRate = 192000
	// MaxChannels is the most channels a recording may have.
	MaxChannels = 8
)

// WAVE format tags understood by decodeWAV.
const (
	wavTagPCM        = 0x0001
	wavTagFloat      = 0x0003
	wavTagExtensible = 0xFFFE
)

// decodeWAV reads a RIFF/WAVE file: 8-bit unsigned, 16/24/32-bit signed or
// 32/64-bit float PCM, any rate in [minRate, MaxRate] and 1 to MaxChannels
// channels (mixed down while converting, so only the mono samples are
// allocated),
// with a plain, 18-byte or WAVE_FORMAT_EXTENSIBLE fmt chunk. A data chunk
// whose declared size is 0 or 0xFFFFFFFF (streaming writers) is read up to
// the end of the file; one that declares more bytes than the file holds is a
// truncated recording: ErrCorrupt, never the part that arrived.
func decodeWAV(data []byte, max time.Duration) ([]float32, error) {
	const f = FormatWAV
	if len(data) < 12 {
		return nil, corrupt(f, "the RIFF header is truncated")
	}
	var (
		haveFmt          bool
		tag, ch, bits    int
		rate, blockAlign int
		pcm              []byte
		haveData         bool
	)
	for off := 12; off+8 <= len(data); {
		id := string(data[off : off+4])
		size := int64(binary.LittleEndian.Uint32(data[off+4 : off+8]))
		body := off + 8
		avail := int64(len(data) - body)
		switch id {
		case "fmt ":
			if size < 16 || size > avail {
				return nil, corrupt(f, "the fmt chunk is truncated")
			}
			b := data[body : body+int(size)]
			tag = int(binary.LittleEndian.Uint16(b[0:2]))
			ch = int(binary.LittleEndian.Uint16(b[2:4]))
			rate = int(binary.LittleEndian.Uint32(b[4:8]))
			blockAlign = int(binary.LittleEndian.Uint16(b[12:14]))
			bits = int(binary.LittleEndian.Uint16(b[14:16]))
			if tag == wavTagExtensible {
				if size < 40 {
					return nil, corrupt(f, "the WAVE_FORMAT_EXTENSIBLE fmt chunk is too short")
				}
				// The sub-format GUID starts with the plain format tag.
				tag = int(binary.LittleEndian.Uint16(b[24:26]))
			}
			haveFmt = true
		case "data":
			if !haveFmt {
				return nil, corrupt(f, "the data chunk comes before the fmt chunk")
			}
			if size == 0 || size == 0xFFFFFFFF {
				size = avail
			} else if size > avail {
				return nil, corrupt(f, "the data chunk holds %d of the %d bytes its header declares (a truncated recording)", avail, size)
			}
			pcm = data[body : body+int(size)]
			haveData = true
		}
		if haveData {
			break
		}
		// Chunks are padded to an even size.
		next := int64(body) + size + size&1
		if next > int64(len(data)) {
			break
		}
		off = int(next)
	}
	if !haveFmt {
		return nil, corrupt(f, "there is no fmt chunk")
	}
	if !haveData {
		return nil, corrupt(f, "there is no data chunk")
	}
	if ch < 1 {
		return nil, corrupt(f, "the fmt chunk declares no channels")
	}
	if err := checkLayout(f, rate, ch); err != nil {
		return nil, err
	}
	var conv func([]byte) float32
	switch {
	case tag == wavTagPCM && bits == 8:
		conv = func(b []byte) float32 { return (float32(b[0]) - 128) / 128 }
	case tag == wavTagPCM && bits == 16:
		conv = func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) / 32768 }
	case tag == wavTagPCM && bits == 24:
		conv = func(b []byte) float32 {
			v := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			return float32(v) / (1 << 23)
		}
	case tag == wavTagPCM && bits == 32:
		conv = func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) / (1 << 31) }
	case tag == wavTagFloat && bits == 32:
		conv = func(b []byte) float32 { return finite(math.Float32frombits(binary.LittleEndian.Uint32(b))) }
	case tag == wavTagFloat && bits == 64:
		conv = func(b []byte) float32 { return finite(float32(math.Float64frombits(binary.LittleEndian.Uint64(b)))) }
	case tag == wavTagPCM || tag == wavTagFloat:
		return nil, unsupported(f, "%d-bit samples are not supported (use 8, 16, 24 or 32-bit integer, or 32/64-bit float)", bits)
	default:
		return nil, unsupported(f, "format tag 0x%04X is not supported (use PCM or IEEE float)", tag)
	}
	width := bits / 8
	if blockAlign != ch*width {
		// Some writers get block align wrong; the sample width and
		// channel count decide the layout.
		blockAlign = ch * width
	}
	frames := len(pcm) / blockAlign
	if frames == 0 {
		return nil, errEmptyFile(f)
	}
	if int64(frames) > maxFrames(max, rate) {
		return nil, tooLong(max)
	}
	out := make([]float32, frames)
	inv := 1 / float32(ch)
	for i := range out {
		frame := pcm[i*blockAlign : i*blockAlign+blockAlign]
		var sum float32
		for c := 0; c < ch; c++ {
			sum += conv(frame[c*width : c*width+width])
		}
		out[i] = sum * inv
	}
	return Resample(out, rate, SampleRate), nil
}

// checkLayout refuses a sample rate outside [minRate, MaxRate] or a channel
// count over MaxChannels, as declared by a header.
func checkLayout(f Format, rate, ch int) error {
	if rate < minRate || rate > MaxRate {
		return unsupported(f, "sample rate %d Hz is outside %d-%d Hz", rate, minRate, MaxRate)
	}
	if ch > MaxChannels {
		return unsupported(f, "%d channels is more than the %d accepted; record mono or stereo", ch, MaxChannels)
	}
	return nil
}

// finite maps NaN and infinities, which a float WAV may hold, to silence.
func finite(v float32) float32 {
	if v != v || v > math.MaxFloat32 || v < -math.MaxFloat32 {
		return 0
	}
	return v
}

// errEmptyFile is the ErrEmpty error for a well-formed file of format f
// without samples.
func errEmptyFile(f Format) error {
	return fmt.Errorf("%w: the %s file contains no audio samples", ErrEmpty, f)
}
