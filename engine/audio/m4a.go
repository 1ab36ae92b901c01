package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
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

// M4AAvailable reports whether M4A/AAC recordings (what iOS records) can be
// decoded now: that needs the ffmpeg executable on PATH. It looks each time,
// so installing ffmpeg takes effect without a restart.
func M4AAvailable() bool { return lookFFmpeg() != "" }

// decodeM4A decodes M4A/AAC (or anything else in an ISO-BMFF container that
// ffmpeg reads) with the ffmpeg executable at path, which also downmixes and
// resamples to 16 kHz; no pure-Go AAC decoder exists. ffmpeg runs without a
// shell, with a timeout, and its output is capped at max: once more arrives
// it is killed and ErrTooLong returned. ffmpeg's own messages are never
// passed on.
//
// Files whose moov box comes before the media data are piped to ffmpeg's
// stdin. Most recorders (iOS and Android included) write moov last, which
// ffmpeg cannot read from a pipe once the media data outgrows its probe
// buffer ("partial file"); those are written to a private temporary file
// in tempDir (os.TempDir() when empty) that is removed before decodeM4A
// returns.
func decodeM4A(data []byte, max time.Duration, path, tempDir string) ([]float32, error) {
	const f = FormatM4A
	if path == "" {
		return nil, unsupported(f, "M4A/AAC needs ffmpeg, which is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ffmpegBaseTimeout+max/2)
	defer cancel()
	input := "pipe:0"
	if !moovFirst(data) {
		tmp, err := os.CreateTemp(tempDir, tempPattern)
		if err != nil {
			return nil, unsupported(f, "no temporary file could be created for ffmpeg")
		}
		defer os.Remove(tmp.Name())
		_, werr := tmp.Write(data)
		if cerr := tmp.Close(); werr != nil || cerr != nil {
			return nil, unsupported(f, "no temporary file could be written for ffmpeg")
		}
		input = "file:" + tmp.Name()
	}
	cmd := exec.CommandContext(ctx, path, "-nostdin", "-hide_banner", "-loglevel", "error",
		"-i", input, "-vn", "-ac", "1", "-ar", "16000", "-f", "f32le", "pipe:1")
	if input == "pipe:0" {
		cmd.Stdin = bytes.NewReader(data)
	}
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

// tempPattern names the temporary copies of M4A uploads.
const tempPattern = "replyd-upload-*.m4a"

// PrepareTempDir makes dir (a Decoder's TempDir) a folder only its owner can
// enter, creating it when needed, and removes every upload copy a crash left
// in it. It returns how many files it removed. (Copies that versions before
// the private folder left in the shared temporary folder are not touched:
// another process may be using a file of that name there.)
func PrepareTempDir(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return 0, err
	}
	removed := 0
	old, _ := filepath.Glob(filepath.Join(dir, tempPattern))
	for _, f := range old {
		if os.Remove(f) == nil {
			removed++
		}
	}
	return removed, nil
}

// moovFirst reports whether the top-level moov box of an ISO-BMFF file comes
// before its mdat box.
func moovFirst(data []byte) bool {
	for off := 0; off+8 <= len(data); {
		size := uint64(binary.BigEndian.Uint32(data[off:]))
		switch string(data[off+4 : off+8]) {
		case "moov":
			return true
		case "mdat":
			return false
		}
		switch size {
		case 0:
			return false // the box runs to the end of the file
		case 1:
			if off+16 > len(data) {
				return false
			}
			size = binary.BigEndian.Uint64(data[off+8:])
		}
		if size < 8 || size > uint64(len(data)-off) {
			return false
		}
		off += int(size)
	}
	return false
}
