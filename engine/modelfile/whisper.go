package modelfile

import (
	"fmt"
	"io"
)

// ggmlMagic opens every whisper.cpp model file ("ggml" as a little-endian
// uint32).
const ggmlMagic = 0x67676d6c

// Whisper's fixed shapes (whisper.cpp: 30 s windows of 3000 mel frames, so
// n_audio_ctx 1500; n_fft 400, so 201 filter bins; 51864 tokens at least).
const (
	whisperAudioCtx = 1500
	whisperFilters  = 201
	whisperMinVocab = 51864
	whisperMaxName  = 1 << 10
	whisperMaxToken = 1 << 10
	whisperMaxDim   = 1 << 22
	whisperMaxCount = 1 << 16 // tensors
)

// whisperTypes are the tensor types engine/whisper reads.
var whisperTypes = map[int]bool{0: true, 1: true, 2: true, 3: true, 6: true, 7: true, 8: true}

// whisperTensors must all be present for engine/whisper to build a model.
var whisperTensors = []string{
	"encoder.conv1.weight", "encoder.conv2.weight", "encoder.positional_embedding",
	"encoder.ln_post.weight", "decoder.positional_embedding", "decoder.token_embedding.weight",
	"decoder.ln.weight",
}

// CheckWhisper checks a whisper.cpp ggml file: magic, hyperparameters in
// range and consistent, the mel filter bank, the vocabulary, and every
// tensor's header and data inside the file; then that the tensors the
// encoder and decoder need are there.
func CheckWhisper(ra io.ReaderAt, size int64) (Info, error) {
	info := Info{Kind: KindWhisper, Arch: "whisper", Bytes: size, WeightTypes: map[string]int{}}
	r := newReader(ra, size)
	if m := r.u32(); r.err == nil && m != ggmlMagic {
		return info, invalid("not a whisper.cpp ggml file (magic %#08x)", m)
	}
	var hp [11]int
	for i := range hp {
		hp[i] = r.i32()
	}
	if r.err != nil {
		return info, r.err
	}
	nVocab, nAudioCtx, nAudioState, nAudioHead, nAudioLayer := hp[0], hp[1], hp[2], hp[3], hp[4]
	nTextCtx, nTextState, nTextHead, nTextLayer, nMels, ftype := hp[5], hp[6], hp[7], hp[8], hp[9], hp[10]
	for _, c := range []struct {
		name   string
		v, max int
	}{
		{"n_vocab", nVocab, 1 << 20}, {"n_audio_ctx", nAudioCtx, 1 << 16}, {"n_audio_state", nAudioState, 1 << 14},
		{"n_audio_head", nAudioHead, 1 << 10}, {"n_audio_layer", nAudioLayer, 1 << 10},
		{"n_text_ctx", nTextCtx, 1 << 16}, {"n_text_state", nTextState, 1 << 14},
		{"n_text_head", nTextHead, 1 << 10}, {"n_text_layer", nTextLayer, 1 << 10}, {"n_mels", nMels, 1 << 10},
	} {
		if c.v < 1 || c.v > c.max {
			return info, invalid("hyperparameter %s = %d is out of range (1 to %d)", c.name, c.v, c.max)
		}
	}
	switch {
	case nAudioState%nAudioHead != 0 || nTextState%nTextHead != 0:
		return info, invalid("state width is not a multiple of the head count")
	case nAudioCtx != whisperAudioCtx:
		return info, invalid("n_audio_ctx = %d, want %d (30 s windows)", nAudioCtx, whisperAudioCtx)
	case nAudioState != nTextState:
		return info, invalid("n_audio_state %d differs from n_text_state %d", nAudioState, nTextState)
	case nVocab < whisperMinVocab:
		return info, invalid("n_vocab = %d is smaller than Whisper's %d", nVocab, whisperMinVocab)
	case ftype < 0:
		return info, invalid("ftype = %d", ftype)
	}
	info.Name = whisperSize(nAudioLayer)

	nMel, nFFT := r.i32(), r.i32()
	if r.err == nil && (nMel != nMels || nFFT != whisperFilters) {
		r.fail("mel filters are %d×%d, want %d×%d", nMel, nFFT, nMels, whisperFilters)
	}
	r.skip(int64(nMel)*int64(nFFT)*4, "mel filters")

	nTok := r.i32()
	if r.err == nil && (nTok < 1 || nTok > nVocab || int64(nTok)*4 > r.left()) {
		r.fail("vocabulary of %d tokens for n_vocab %d", nTok, nVocab)
	}
	for i := 0; i < nTok && r.err == nil; i++ {
		l := r.i32()
		if r.err == nil && (l < 0 || l > whisperMaxToken) {
			r.fail("token %d has length %d", i, l)
		}
		r.skip(int64(l), "a token")
	}
	if r.err != nil {
		return info, r.err
	}
	info.Vocab = nTok

	names := map[string]bool{}
	for r.err == nil && r.left() > 0 {
		if len(names) >= whisperMaxCount {
			r.fail("more than %d tensors", whisperMaxCount)
			break
		}
		nDims, nameLen, typ := r.i32(), r.i32(), r.i32()
		if r.err != nil {
			break
		}
		if nDims < 1 || nDims > 4 {
			r.fail("tensor with %d dimensions", nDims)
			break
		}
		if nameLen < 1 || nameLen > whisperMaxName {
			r.fail("tensor name of %d bytes", nameLen)
			break
		}
		tt, ok := ggmlTypes[uint32(typ)]
		if !ok || !whisperTypes[typ] {
			r.fail("tensor of unsupported type %d", typ)
			break
		}
		var ne [4]int64
		elems := int64(1)
		for i := 0; i < nDims && r.err == nil; i++ {
			d := r.i32()
			if r.err == nil && (d < 1 || d > whisperMaxDim || elems > size*8/int64(d)) {
				r.fail("tensor dimension %d does not fit in a file of %d bytes", d, size)
			}
			ne[i] = int64(d)
			elems *= int64(max(d, 1))
		}
		name := string(r.bytes(int64(nameLen), whisperMaxName, "tensor name"))
		if r.err != nil {
			break
		}
		if ne[0]%tt.values != 0 {
			r.fail("tensor %q: row of %d values is not a whole number of %s blocks", name, ne[0], tt.name)
			break
		}
		if names[name] {
			r.fail("tensor %q appears twice", name)
			break
		}
		names[name] = true
		info.WeightTypes[tt.name]++
		if n := elems / tt.values * tt.size; n > r.left() {
			r.fail("truncated: tensor %q needs %d bytes, %d left", name, n, r.left())
		} else {
			r.skip(n, "tensor data")
		}
	}
	if r.err != nil {
		return info, r.err
	}
	info.Tensors = len(names)
	for _, n := range whisperTensors {
		if !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	for i := 0; i < nAudioLayer; i++ {
		if n := fmt.Sprintf("encoder.blocks.%d.attn.query.weight", i); !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	for i := 0; i < nTextLayer; i++ {
		if n := fmt.Sprintf("decoder.blocks.%d.cross_attn.query.weight", i); !names[n] {
			return info, invalid("tensor %q is missing", n)
		}
	}
	return info, nil
}

// whisperSize names the model by its encoder layers, as engine/whisper does.
func whisperSize(layers int) string {
	switch layers {
	case 4:
		return "tiny"
	case 6:
		return "base"
	case 12:
		return "small"
	case 24:
		return "medium"
	case 32:
		return "large"
	}
	return fmt.Sprintf("%d layers", layers)
}
