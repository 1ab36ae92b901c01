package whisper

import "errors"

// computePath is where a Model's encoder and decoder run: replyd's own
// kernels and OpenBLAS (blasPath, blas.go) or the ggml graphs on a ggml
// backend (graphPath, graph.go). The control loop (transcribe.go,
// temperature.go), the mel and every rule applied to the logits are the
// same Go code on both; each method returns an error instead of stopping
// the loop any other way.
type computePath interface {
	// encode runs the encoder on the first 2n frames of one window's
	// log-mel input ([n_mels][windowFrames]), 0 < n ≤ n_audio_ctx: the
	// encoder works on n positions, as whisper.cpp's audio_ctx = n. It
	// keeps the output for cross. It returns the transcription's context
	// error when that ended between two of its steps (encoderStep).
	encode(mel []float32, n int) error
	// cross computes the decoder's cross-attention K/V from the last
	// encode's output into st, and records its n positions in st.ctx (the
	// decoder attends over those rows only); st's self-attention cache is
	// emptied.
	cross(st *decState) error
	// decode feeds tokens at positions st.n.. and writes the final
	// (layer-normed) hidden states, [len(tokens)][d], to out; st.n grows by
	// len(tokens). The caller guarantees st.n+len(tokens) ≤ n_text_ctx and
	// that every token is below n_vocab.
	decode(st *decState, tokens []int, out []float32) error
	// logits writes the logits of ids 0..len(out)-1 for one hidden state
	// ([d]) to out.
	logits(hidden, out []float32) error
}

// decState is the decoder's state for one window: the length of the
// cross-attention (the window's encoder positions, whisper.cpp's
// audio_ctx) and how much of the self-attention cache is filled; on the
// BLAS path also the caches themselves (the ggml path keeps them on its
// backend).
//
// Both K/V are kept as IEEE halves, as whisper.cpp keeps them: that halves
// the memory the decoder reads per token.
type decState struct {
	n      int        // positions filled in the self-attention cache
	ctx    int        // rows of the cross-attention K/V the decoder attends over
	k, v   [][]uint16 // per layer, [n_text_ctx][d], F16 (BLAS path)
	ck, cv [][]uint16 // per layer, [n_audio_ctx][d] (the first ctx rows in use), F16 (BLAS path)
}

// reset empties the self-attention cache, keeping the cross K/V.
func (st *decState) reset() { st.n = 0 }

// errAudioCtx is wrapped by the error for an encoder window outside
// 1..n_audio_ctx.
var errAudioCtx = errors.New("whisper: audio_ctx out of range")

// encodeWindow encodes one window's log-mel input ([n_mels][windowFrames])
// on n positions (0: the model's n_audio_ctx) and computes the decoder's
// cross-attention K/V into the Model's one decoder state, which it returns
// with an empty self-attention cache. The previous state returned is
// overwritten.
func (m *Model) encodeWindow(mel []float32, n int) (*decState, error) {
	if n == 0 {
		n = m.hp.NAudioCtx
	}
	if n < 1 || n > m.hp.NAudioCtx {
		return nil, errAudioCtx
	}
	if err := m.comp.encode(mel, n); err != nil {
		return nil, err
	}
	st := m.scr.dec
	if st == nil {
		st = &decState{}
		m.scr.dec = st
	}
	if err := m.comp.cross(st); err != nil {
		return nil, err
	}
	return st, nil
}

// decode feeds tokens at positions st.n.. (computePath.decode) and returns
// the hidden states, [len(tokens)][d], in a new slice.
func (m *Model) decode(st *decState, tokens []int) ([]float32, error) {
	out := make([]float32, len(tokens)*m.hp.NTextState)
	if err := m.comp.decode(st, tokens, out); err != nil {
		return nil, err
	}
	return out, nil
}

// textLogits returns the logits of ids 0..eot only (the ids greedy
// decoding may pick) for one hidden state. The result lives in a scratch
// buffer that the next call overwrites.
func (m *Model) textLogits(hidden []float32) ([]float32, error) {
	n := m.tok.eot + 1
	if len(m.scr.logits) < n {
		m.scr.logits = make([]float32, n)
	}
	out := m.scr.logits[:n]
	return out, m.comp.logits(hidden, out)
}

// logits returns the n_vocab output logits for one hidden state.
func (m *Model) logits(hidden []float32) ([]float32, error) {
	out := make([]float32, m.hp.NVocab)
	return out, m.comp.logits(hidden, out)
}

// encoderStep is a point between the encoder's steps: it may grow (see
// growThreads). It returns the transcription's context error once that
// has ended: the encoder stops there, so that a canceled pass (a
// speculative one giving way to committed work) gives its cores up within
// one step (half a layer) rather than after the whole encoder.
func (m *Model) encoderStep() error {
	if m.stop != nil {
		if err := m.stop.Err(); err != nil {
			m.stopBLAS()
			return err
		}
	}
	m.growThreads()
	return nil
}
