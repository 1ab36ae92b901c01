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
		return clip{wav: testaudio.Mono16(16000, testaudio.Voiced(seconds, 16000)), words: jfkWords,
			source: "synthetic voiced sound"}, nil
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
	return clip{wav: testaudio.Mono16(rate, pcm), words: jfkWords,
		source: fmt.Sprintf("first %.1f s of %s", float64(len(pcm))/float64(rate), filepath.Base(path))}, nil
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
