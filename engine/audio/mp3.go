package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/hajimehoshi/go-mp3"
)

// mp3DecoderDelay is the delay, in samples, of the standard MP3 synthesis
// filterbank; LAME's encoder delay field does not include it.
const mp3DecoderDelay = 529

// skipID3v2 returns data after any ID3v2 tags at its start. ok is false when
// a tag claims more bytes than data holds.
func skipID3v2(data []byte) (rest []byte, ok bool) {
	for len(data) >= 10 && string(data[:3]) == "ID3" {
		sz := data[6:10]
		if sz[0]|sz[1]|sz[2]|sz[3] >= 0x80 {
			return nil, false // sizes are synchsafe: the top bits are zero
		}
		size := int(sz[0])<<21 | int(sz[1])<<14 | int(sz[2])<<7 | int(sz[3])
		size += 10
		if data[5]&0x10 != 0 { // footer present
			size += 10
		}
		if size > len(data) {
			return nil, false
		}
		data = data[size:]
	}
	return data, true
}

// mp3FrameHeaderAt reports whether a valid MPEG audio Layer III frame header
// starts at data[off].
func mp3FrameHeaderAt(data []byte, off int) bool {
	if off < 0 || off+4 > len(data) {
		return false
	}
	h := data[off:]
	return h[0] == 0xFF && h[1]&0xE0 == 0xE0 &&
		h[1]>>3&3 != 1 && // version not reserved
		h[1]>>1&3 == 1 && // Layer III
		h[2]>>4 != 0 && h[2]>>4 != 15 && // bitrate neither free nor bad
		h[2]>>2&3 != 3 // sample rate not reserved
}

// lameGapless reads the Xing/Info and LAME tags of the first frame of data
// (which must start with a frame header): whether the first frame is such a
// tag frame, and the encoder delay and padding in samples when the LAME
// extension gives them.
func lameGapless(data []byte) (infoFrame bool, frames, delay, padding int, ok bool) {
	if !mp3FrameHeaderAt(data, 0) {
		return false, 0, 0, 0, false
	}
	mpeg1 := data[1]>>3&3 == 3
	mono := data[3]>>6 == 3
	side := 17
	switch {
	case mpeg1 && !mono:
		side = 32
	case !mpeg1 && mono:
		side = 9
	}
	p := 4 + side
	if p+8 > len(data) {
		return false, 0, 0, 0, false
	}
	if tag := string(data[p : p+4]); tag != "Xing" && tag != "Info" {
		return false, 0, 0, 0, false
	}
	flags := binary.BigEndian.Uint32(data[p+4:])
	p += 8
	if flags&1 != 0 {
		if p+4 > len(data) {
			return true, 0, 0, 0, false
		}
		frames = int(binary.BigEndian.Uint32(data[p:]))
		p += 4
	}
	for _, skip := range []struct {
		bit uint32
		n   int
	}{{2, 4}, {4, 100}, {8, 4}} {
		if flags&skip.bit != 0 {
			p += skip.n
		}
	}
	if p+24 > len(data) {
		return true, frames, 0, 0, false
	}
	enc := data[p : p+4]
	if !bytes.Equal(enc, []byte("LAME")) && !bytes.Equal(enc, []byte("Lavc")) && !bytes.Equal(enc, []byte("Lavf")) {
		return true, frames, 0, 0, false
	}
	b := data[p+21 : p+24]
	delay = int(b[0])<<4 | int(b[1])>>4
	padding = int(b[1]&0x0F)<<8 | int(b[2])
	return true, frames, delay, padding, true
}

// readerOnly hides the io.Seeker of a reader so that go-mp3 decodes as a
// stream instead of scanning every frame up front.
type readerOnly struct{ io.Reader }

// decodeMP3 decodes MPEG-1/2/2.5 Layer III with go-mp3. ID3v2 tags are
// skipped here (go-mp3 would allocate whatever size a tag claims), and the
// encoder delay and padding recorded in a LAME Info frame are trimmed so the
// result lines up with the original recording.
func decodeMP3(data []byte, max time.Duration) ([]float32, error) {
	const f = FormatMP3
	body, ok := skipID3v2(data)
	if !ok {
		return nil, corrupt(f, "the ID3v2 tag is larger than the file")
	}
	if len(body) == 0 {
		return nil, errEmptyFile(f)
	}
	info, frames, delay, padding, gapless := lameGapless(body)
	dec, err := mp3.NewDecoder(readerOnly{bytes.NewReader(body)})
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corrupt(f, "no complete MP3 frame was found")
		}
		return nil, corrupt(f, "the MP3 stream is malformed")
	}
	rate := dec.SampleRate()
	if rate < minRate || rate > MaxRate {
		return nil, corrupt(f, "the MP3 sample rate is invalid")
	}
	spf := 1152
	if body[1]>>3&3 != 3 {
		spf = 576 // MPEG-2 and 2.5 Layer III frames are half as long
	}
	// go-mp3 always emits 16-bit stereo; the leading trim is at most a
	// few frames, so allow for it in the limit.
	limit := maxFrames(max, rate) + int64(spf) + 4096 + mp3DecoderDelay
	var pcm []float32
	buf := make([]byte, 4*spf)
	for stalls := 0; stalls < 100; {
		n, err := dec.Read(buf)
		n -= n % 4
		for i := 0; i < n; i += 4 {
			l := int16(binary.LittleEndian.Uint16(buf[i:]))
			r := int16(binary.LittleEndian.Uint16(buf[i+2:]))
			pcm = append(pcm, (float32(l)+float32(r))/65536)
		}
		if int64(len(pcm)) > limit {
			return nil, tooLong(max)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if len(pcm) == 0 {
				return nil, corrupt(f, "the MP3 stream is malformed")
			}
			break // keep what decoded before the damage
		}
		if n == 0 {
			stalls++
		} else {
			stalls = 0
		}
	}
	switch {
	case gapless:
		start := delay + mp3DecoderDelay
		if info {
			start += spf // go-mp3 decodes the Info frame as silence
		}
		end := len(pcm)
		if frames > 0 {
			if want := start + frames*spf - delay - padding; want < end && want > start {
				end = want
			}
		}
		if start >= end {
			return nil, errEmptyFile(f)
		}
		pcm = pcm[start:end]
	case info && len(pcm) > spf:
		pcm = pcm[spf:] // a Xing/Info frame without LAME's delay fields
	}
	return Resample(pcm, rate, SampleRate), nil
}
