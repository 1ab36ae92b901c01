package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// clip is the partner's utterance.
type clip struct {
	wav    []byte
	words  string // what is said, for -text
	source string
}

// jfkWords is what jfk.wav says.
const jfkWords = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

// partnerClip returns the first seconds of path (16-bit PCM WAV), of the
// shared test data's jfk.wav when path is empty and the data is there, or a
// synthetic voiced sound.
func partnerClip(path string, seconds float64) (clip, error) {
	if path == "" {
		for _, dir := range []string{os.Getenv("REPLYD_TESTDATA"), "../shared/testdata"} {
			if p := filepath.Join(dir, "whisper", "audio", "jfk.wav"); dir != "" && fileExists(p) {
				path = p
				break
			}
		}
	}
	if path == "" {
		return clip{wav: voicedWAV(seconds), words: jfkWords, source: "synthetic voiced sound"}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return clip{}, err
	}
	cut, err := cutWAV(b, seconds)
	if err != nil {
		return clip{}, fmt.Errorf("%s: %w", path, err)
	}
	return clip{wav: cut, words: jfkWords, source: fmt.Sprintf("first %.1f s of %s", seconds, filepath.Base(path))}, nil
}

// cutWAV returns a 16-bit PCM WAV with the first seconds of b's data.
func cutWAV(b []byte, seconds float64) ([]byte, error) {
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, errors.New("not a RIFF WAVE file")
	}
	var fmtChunk []byte
	for off := 12; off+8 <= len(b); {
		id, n := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8 : min(off+8+n, len(b))]
		switch id {
		case "fmt ":
			fmtChunk = body
		case "data":
			if len(fmtChunk) < 16 || binary.LittleEndian.Uint16(fmtChunk) != 1 || binary.LittleEndian.Uint16(fmtChunk[14:]) != 16 {
				return nil, errors.New("not 16-bit PCM")
			}
			rate := binary.LittleEndian.Uint32(fmtChunk[4:])
			frame := int(binary.LittleEndian.Uint16(fmtChunk[12:]))
			keep := min(len(body), int(seconds*float64(rate))*frame)
			return wavFile(fmtChunk[:16], body[:keep]), nil
		}
		off += 8 + n + n%2
	}
	return nil, errors.New("no data chunk")
}

func wavFile(fmtChunk, data []byte) []byte {
	var w bytes.Buffer
	le := func(v uint32) { binary.Write(&w, binary.LittleEndian, v) }
	w.WriteString("RIFF")
	le(uint32(4 + 8 + len(fmtChunk) + 8 + len(data)))
	w.WriteString("WAVEfmt ")
	le(uint32(len(fmtChunk)))
	w.Write(fmtChunk)
	w.WriteString("data")
	le(uint32(len(data)))
	w.Write(data)
	return w.Bytes()
}

// voicedWAV is seconds of a voiced sound at 16 kHz: harmonics of a gliding
// pitch with a syllable-rate envelope.
func voicedWAV(seconds float64) []byte {
	const rate = 16000
	n := int(seconds * rate)
	data := make([]byte, 2*n)
	phase := 0.0
	for i := 0; i < n; i++ {
		t := float64(i) / rate
		phase += (130 + 20*math.Sin(2*math.Pi*0.7*t)) / rate
		v := 0.0
		for h := 1; h <= 12; h++ {
			v += math.Sin(2*math.Pi*float64(h)*phase) / float64(h)
		}
		env := 0.5 + 0.5*math.Sin(2*math.Pi*4*t)
		binary.LittleEndian.PutUint16(data[2*i:], uint16(int16(5000*v*env)))
	}
	f := make([]byte, 16)
	binary.LittleEndian.PutUint16(f[0:], 1)
	binary.LittleEndian.PutUint16(f[2:], 1)
	binary.LittleEndian.PutUint32(f[4:], rate)
	binary.LittleEndian.PutUint32(f[8:], 2*rate)
	binary.LittleEndian.PutUint16(f[12:], 2)
	binary.LittleEndian.PutUint16(f[14:], 16)
	return wavFile(f, data)
}

// ensureModel returns the synthesised model of shape in dir, writing it with
// `bin models synth` when it is missing.
func ensureModel(ctx context.Context, bin, dir, shape string) (string, error) {
	ext := ".gguf"
	if strings.HasSuffix(shape, ".en") {
		ext = ".bin"
	}
	p := filepath.Join(dir, "synth-"+shape+"-q8_0"+ext)
	if fileExists(p) {
		return p, nil
	}
	out, err := exec.CommandContext(ctx, bin, "models", "synth", "--shape", shape, "--dir", dir).Output()
	if err != nil {
		return "", fmt.Errorf("replyd models synth --shape %s: %w", shape, err)
	}
	if got := strings.TrimSpace(string(out)); got != p {
		return "", fmt.Errorf("replyd models synth wrote %q, expected %q", got, p)
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
