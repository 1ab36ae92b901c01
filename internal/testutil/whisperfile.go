package testutil

import (
	"bytes"
	"encoding/binary"
)

// WhisperFile builds a small whisper.cpp ggml file that models/modelfile's
// checker accepts: the hyperparameters of a tiny f32 model (mut, when set,
// changes them first: n_vocab, n_audio_ctx, n_audio_state, n_audio_head,
// n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer,
// n_mels, ftype), a mel filter bank, a two-token vocabulary and the tensors
// the checker requires (shapes are not the real model's: 4×4 and f32). It
// loads in no engine.
func WhisperFile(mut func(hp []int32)) []byte {
	var b bytes.Buffer
	w := func(v ...int32) { binary.Write(&b, binary.LittleEndian, v) }
	hp := []int32{51864, 1500, 4, 1, 1, 4, 4, 1, 1, 2, 0}
	if mut != nil {
		mut(hp)
	}
	w(0x67676d6c) // "ggml", whisper.cpp's magic
	w(hp...)
	w(2, 201)
	b.Write(make([]byte, 2*201*4))
	w(2)
	w(1)
	b.WriteString("!")
	w(1)
	b.WriteString(" ")
	for _, n := range []string{
		"encoder.conv1.weight", "encoder.conv2.weight", "encoder.positional_embedding",
		"encoder.ln_post.weight", "decoder.positional_embedding", "decoder.token_embedding.weight",
		"decoder.ln.weight", "encoder.blocks.0.attn.query.weight", "decoder.blocks.0.cross_attn.query.weight",
	} {
		w(2, int32(len(n)), 0, 4, 4)
		b.WriteString(n)
		b.Write(make([]byte, 4*4*4))
	}
	return b.Bytes()
}
