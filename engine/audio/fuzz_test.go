package audio

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// fuzzMax is the limit FuzzDecode decodes against.
const fuzzMax = 3 * time.Second

// FuzzDecode feeds Decode arbitrary bytes: it must never panic, every error
// must wrap exactly one sentinel with a message, and every success must be
// non-empty, within the limit, with every sample in [-1, 1]. Seeds are the heads of the shared
// format files (when present) and small synthetic files: truncated, with huge
// declared sizes, garbage and empty. M4A inputs are skipped: they go to the
// ffmpeg executable, not to code in this package, and spawning it would
// starve the fuzzer.
func FuzzDecode(f *testing.F) {
	if d := shareddata.Find(); d != "" {
		files, _ := filepath.Glob(filepath.Join(d, "whisper", "audio-formats", "speech.*"))
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			for _, n := range []int{64, 600, 4096} {
				f.Add(data[:min(n, len(data))])
			}
		}
	}
	tone := testaudio.Sine(440, 8000, 800, 0.5)
	wav16 := testaudio.WAV(testaudio.Format{Bits: 16, Rate: 8000, Channels: 1}, [][]float32{tone})
	wavExt := testaudio.WAV(testaudio.Format{Bits: 24, Extensible: true, Rate: 44100, Channels: 2}, [][]float32{tone[:100], tone[:100]})
	f.Add(wav16)
	f.Add(wavExt)
	f.Add(wav16[:40])
	f.Add(testaudio.WAV(testaudio.Format{Bits: 32, Float: true, Rate: 48000, Channels: 6}, [][]float32{{1}, {2}, {3}, {4}, {5}, {6}}))
	huge := append([]byte(nil), wav16...)
	binary.LittleEndian.PutUint32(huge[len(huge)-1600-4:], 0xFFFFFFF0)
	f.Add(huge)
	f.Add([]byte{})
	f.Add([]byte("RIFF\xff\xff\xff\xffWAVEfmt \xff\xff\xff\xff"))
	f.Add([]byte("fLaC\x00\x00\x00\x22\x10\x00\x10\x00\x00\x00\x00\x00\x00\x00\x0a\xc4\x40\xf0\xff\xff\xff\xff"))
	f.Add([]byte("ID3\x04\x00\x00\x7f\x7f\x7f\x7f"))
	f.Add([]byte{0xFF, 0xFB, 0x90, 0x64, 0, 0, 0, 0})
	f.Add(oggPageBytes(2, 0, []byte("OpusHead\x01\x02\x38\x01\x80\xbb\x00\x00\x00\x00\x00")))
	f.Add(webmWithCodec("A_OPUS"))
	f.Add([]byte{0x1A, 0x45, 0xDF, 0xA3, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, data []byte) {
		if Detect(data) == FormatM4A {
			t.Skip("M4A is decoded by the ffmpeg executable")
		}
		pcm, err := Decode(data, fuzzMax)
		if err != nil {
			n := 0
			for _, s := range []error{ErrUnsupported, ErrCorrupt, ErrTooLong, ErrEmpty} {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 || len(err.Error()) < 20 {
				t.Fatalf("error %q wraps %d sentinels or has no message", err, n)
			}
			if pcm != nil {
				t.Fatalf("%d samples returned with an error", len(pcm))
			}
			return
		}
		if len(pcm) == 0 || int64(len(pcm)) > maxFrames(fuzzMax, SampleRate) {
			t.Fatalf("success with %d samples (limit %d)", len(pcm), maxFrames(fuzzMax, SampleRate))
		}
		for i, v := range pcm {
			if !(v >= -1 && v <= 1) {
				t.Fatalf("sample %d is %v", i, v)
			}
		}
	})
}
