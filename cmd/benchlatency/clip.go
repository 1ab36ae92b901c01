package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/replyd/replyd/internal/shareddata"
	"github.com/replyd/replyd/internal/testaudio"
)

// clip is the partner's utterance.
type clip struct {
	wav    []byte
	words  string // what is said, for -text
	source string
	// pcm is the clip at 16 kHz, for the live path; speechEnd is where its
	// sound ends (samples).
	pcm       []float32
	speechEnd int
}

// jfkWords is what jfk.wav says.
const jfkWords = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

// partnerClip returns the first seconds of path (16-bit PCM mono WAV), of
// the shared test data's jfk.wav when path is empty and the data is there,
// or of a synthetic voiced sound.
func partnerClip(path string, seconds float64) (clip, error) {
	if path == "" {
		if dir := shareddata.Find(); dir != "" {
			path = filepath.Join(dir, "whisper", "audio", "jfk.wav")
		}
	}
	if path == "" {
		pcm := testaudio.Voiced(seconds, 16000)
		return clip{wav: testaudio.Mono16(16000, pcm), words: jfkWords,
			source: "synthetic voiced sound", pcm: pcm, speechEnd: soundEnd(pcm)}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return clip{}, err
	}
	rate, pcm, err := testaudio.ReadMono16(b)
	if err != nil {
		return clip{}, fmt.Errorf("%s: %w", path, err)
	}
	pcm = pcm[:min(len(pcm), int(seconds*float64(rate)))]
	live := resample16k(pcm, rate)
	return clip{wav: testaudio.Mono16(rate, pcm), words: jfkWords,
		source: fmt.Sprintf("first %.1f s of %s", float64(len(pcm))/float64(rate), filepath.Base(path)),
		pcm:    live, speechEnd: soundEnd(live)}, nil
}

// soundEnd returns the index after the last sample of pcm louder than
// 0.02 (about -34 dBFS): where the partner's speech ends.
func soundEnd(pcm []float32) int {
	for i := len(pcm) - 1; i >= 0; i-- {
		if pcm[i] > 0.02 || pcm[i] < -0.02 {
			return i + 1
		}
	}
	return 0
}

// resample16k converts pcm at rate to 16 kHz by linear interpolation (the
// conversation page does the same when its audio runs at another rate).
func resample16k(pcm []float32, rate int) []float32 {
	if rate == 16000 || len(pcm) < 2 {
		return pcm
	}
	step := float64(rate) / 16000
	out := make([]float32, 0, int(float64(len(pcm))/step)+1)
	for pos := 0.0; pos < float64(len(pcm)-1); pos += step {
		i := int(pos)
		f := float32(pos - float64(i))
		out = append(out, pcm[i]*(1-f)+pcm[i+1]*f)
	}
	return out
}

// ensureModel returns the synthesised model of shape in dir, writing it with
// `bin models synth` when it is missing, or when a language model there was
// written before synth gave the Qwen2.5 shapes Qwen's real tokenizer.
func ensureModel(ctx context.Context, bin, dir, shape string) (string, error) {
	ext := ".gguf"
	if strings.HasSuffix(shape, ".en") {
		ext = ".bin"
	}
	p := filepath.Join(dir, "synth-"+shape+"-q8_0"+ext)
	if fileExists(p) && (ext != ".gguf" || hasBPEVocab(p)) {
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

// hasBPEVocab reports whether the GGUF file p names a pre-tokenizer
// (tokenizer.ggml.pre), which synth writes, before the vocabulary, only
// with Qwen's byte-level BPE vocabulary; older synthesised files spelled
// unknown words letter by letter and hold about 3x the tokens.
func hasBPEVocab(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	n, _ := io.ReadFull(f, head)
	return bytes.Contains(head[:n], []byte("tokenizer.ggml.pre"))
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
