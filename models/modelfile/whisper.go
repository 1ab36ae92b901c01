package modelfile

import (
	"fmt"
	"io"
	"strings"

	"github.com/replyd/replyd/engine/whisper/ggmlfile"
)

// ggmlMagic opens every whisper.cpp model file.
const ggmlMagic = ggmlfile.Magic

// whisperTensors must all be present for engine/whisper to build a model.
var whisperTensors = []string{
	"encoder.conv1.weight", "encoder.conv2.weight", "encoder.positional_embedding",
	"encoder.ln_post.weight", "decoder.positional_embedding", "decoder.token_embedding.weight",
	"decoder.ln.weight",
}

// CheckWhisper checks a whisper.cpp ggml file with the parser engine/whisper
// loads it with (ggmlfile): magic, hyperparameters in range and
// consistent, the mel filter bank, the vocabulary, and every tensor's
// header and data inside the file; then that the tensors the encoder and
// decoder need are there.
func CheckWhisper(ra io.ReaderAt, size int64) (Info, error) {
	info := Info{Kind: KindWhisper, Arch: "whisper", Bytes: size, WeightTypes: map[string]int{}}
	r := ggmlfile.NewReader(io.NewSectionReader(ra, 0, size), size)
	h, err := r.Header(false)
	if err != nil {
		return info, whisperInvalid(err)
	}
	hp := h.HParams
	info.Name = whisperSize(hp.NAudioLayer)
	info.Vocab = h.NTokens
	names := map[string]bool{}
	for {
		t, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, whisperInvalid(err)
		}
		if names[t.Name] {
			return info, invalid("tensor %q appears twice", t.Name)
		}
		names[t.Name] = true
		info.WeightTypes[t.Type.String()]++
		if err := r.Skip(); err != nil {
			return info, whisperInvalid(err)
		}
	}
	info.Tensors = len(names)
	for _, n := range whisperTensors {
		if !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	for i := 0; i < hp.NAudioLayer; i++ {
		if n := fmt.Sprintf("encoder.blocks.%d.attn.query.weight", i); !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	for i := 0; i < hp.NTextLayer; i++ {
		if n := fmt.Sprintf("decoder.blocks.%d.cross_attn.query.weight", i); !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	return info, nil
}

// whisperInvalid makes a parser's error this package's ErrInvalid.
func whisperInvalid(err error) error {
	msg := strings.TrimPrefix(err.Error(), ggmlfile.ErrFormat.Error()+": ")
	return invalid("%s", msg)
}

// whisperSize names the model by its encoder layers, as engine/whisper does.
func whisperSize(layers int) string {
	if n := ggmlfile.SizeName(layers); n != "" {
		return n
	}
	return fmt.Sprintf("%d layers", layers)
}
