package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os/exec"
	"time"
)

// ffmpegBaseTimeout is the time ffmpeg gets for any M4A upload; it gets
// half of max on top, far more than decoding needs.
const ffmpegBaseTimeout = 10 * time.Second

// lookFFmpeg returns the path of the ffmpeg executable, or "" when it is not
// installed.
func lookFFmpeg() string {
	p, err := exec.LookPath("ffmpeg")
	if err != nil {
		return ""
	}
	return p
}

// decodeM4A decodes M4A/AAC (or anything else in an ISO-BMFF container that
// ffmpeg reads) by piping it through the ffmpeg executable at path, which
// also downmixes and resamples to 16 kHz. No pure-Go AAC decoder exists.
// ffmpeg runs without a shell, with a timeout, and its output is capped at
// max: once more arrives it is killed and ErrTooLong returned. ffmpeg's own
// messages are never passed on.
func decodeM4A(data []byte, max time.Duration, path string) ([]float32, error) {
	const f = FormatM4A
	if path == "" {
		return nil, unsupported(f, "M4A/AAC needs ffmpeg, which is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ffmpegBaseTimeout+max/2)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-nostdin", "-hide_banner", "-loglevel", "error",
		"-i", "pipe:0", "-vn", "-ac", "1", "-ar", "16000", "-f", "f32le", "pipe:1")
	cmd.Stdin = bytes.NewReader(data)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, unsupported(f, "ffmpeg could not be started")
	}
	if err := cmd.Start(); err != nil {
		return nil, unsupported(f, "ffmpeg could not be started")
	}
	limit := maxFrames(max, SampleRate) * 4
	out, readErr := io.ReadAll(io.LimitReader(stdout, limit+4))
	over := int64(len(out)) > limit
	if over {
		cancel() // stop ffmpeg; the rest of its output is not wanted
	}
	waitErr := cmd.Wait()
	switch {
	case over:
		return nil, tooLong(max)
	case ctx.Err() != nil:
		return nil, corrupt(f, "decoding took too long")
	case readErr != nil || waitErr != nil:
		return nil, corrupt(f, "the M4A/AAC data could not be decoded")
	}
	pcm := make([]float32, len(out)/4)
	for i := range pcm {
		pcm[i] = finite(math.Float32frombits(binary.LittleEndian.Uint32(out[i*4:])))
	}
	if len(pcm) == 0 {
		return nil, errEmptyFile(f)
	}
	return pcm, nil
}
