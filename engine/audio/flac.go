package audio

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/mewkiz/flac"
)

// decodeFLAC decodes a FLAC stream (optionally behind an ID3v2 tag) with
// mewkiz/flac, frame by frame. A total length declared in STREAMINFO is
// checked against max before any frame is decoded.
func decodeFLAC(data []byte, max time.Duration) ([]float32, error) {
	const f = FormatFLAC
	body, ok := skipID3v2(data)
	if !ok {
		return nil, corrupt(f, "the ID3v2 tag is larger than the file")
	}
	stream, err := flac.New(bytes.NewReader(body))
	if err != nil {
		return nil, corrupt(f, "the FLAC header or metadata is malformed")
	}
	info := stream.Info
	rate := int(info.SampleRate)
	if err := checkLayout(f, rate, int(info.NChannels)); err != nil {
		return nil, err
	}
	limit := maxFrames(max, rate)
	if info.NSamples > uint64(limit) {
		return nil, tooLong(max)
	}
	var pcm []float32 // mono at rate
	for {
		fr, err := stream.ParseNext()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if len(pcm) == 0 {
				return nil, corrupt(f, "the first FLAC frame is malformed")
			}
			break // keep the frames before a damaged or truncated tail
		}
		if fr.SampleRate != 0 && int(fr.SampleRate) != rate {
			return nil, unsupported(f, "the sample rate changes within the stream")
		}
		bps := int(fr.BitsPerSample)
		if bps == 0 {
			bps = int(info.BitsPerSample)
		}
		if bps < 4 || bps > 32 || len(fr.Subframes) == 0 {
			return nil, corrupt(f, "a FLAC frame has an invalid layout")
		}
		n := int(fr.BlockSize)
		if int64(len(pcm)+n) > limit {
			return nil, tooLong(max)
		}
		scale := 1 / (float32(int64(1)<<(bps-1)) * float32(len(fr.Subframes)))
		for i := 0; i < n; i++ {
			var s float32
			for _, sub := range fr.Subframes {
				if i < len(sub.Samples) {
					s += float32(sub.Samples[i])
				}
			}
			pcm = append(pcm, s*scale)
		}
	}
	if len(pcm) == 0 {
		return nil, errEmptyFile(f)
	}
	return Resample(pcm, rate, SampleRate), nil
}
