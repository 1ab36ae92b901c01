// Package ggmlfile reads the header of whisper.cpp's ggml model files: the
// magic, the hyperparameters, the mel filter bank, the vocabulary and each
// tensor's header, checking every length against the bytes the file still
// has. It is pure Go (no cgo), so that models/modelfile can check a file
// without compiling engine/whisper, which reads the tensors' data through
// the same parser.
//
// The layout is whisper.cpp's (whisper_model_load in src/whisper.cpp, and
// §1 of the shared conformance data's README): int32 little-endian fields,
// no padding; magic 0x67676d6c, 11 hparams, n_mel and n_fft then the
// filters as float32, the vocabulary count then each token's length and
// bytes, then tensors until the end of the file (n_dims, name length, type,
// n_dims sizes with ne[0] varying fastest, the name, the data).
package ggmlfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic opens every whisper.cpp model file ("ggml" read as a little-endian
// int32).
const Magic = 0x67676d6c

// Whisper's fixed shapes: 30 s windows of 3000 mel frames, so n_audio_ctx
// 1500; n_fft 400, so 201 filter bins per mel; 51864 tokens at least.
const (
	AudioCtx = 1500
	Filters  = 201
	MinVocab = 51864
)

// Limits on header fields that keep a hostile file from asking for absurd
// work before the file-size checks apply.
const (
	MaxNameLen  = 1 << 10
	MaxTokenLen = 1 << 10
	MaxDim      = 1 << 22 // one tensor dimension
	MaxTensors  = 1 << 16
	maxDims     = 4
)

// ErrFormat is wrapped by every error that describes a malformed file.
var ErrFormat = errors.New("not a valid whisper.cpp ggml model")

// Type is a tensor element type, numbered as ggml numbers them.
type Type int32

// Tensor element types a whisper.cpp model may contain.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
)

// String returns ggml's name of the type.
func (t Type) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q4_0:
		return "q4_0"
	case Q4_1:
		return "q4_1"
	case Q5_0:
		return "q5_0"
	case Q5_1:
		return "q5_1"
	case Q8_0:
		return "q8_0"
	}
	return fmt.Sprintf("type%d", int32(t))
}

// BlockSize returns the number of values per block and the bytes per
// block, or ok false for a type whisper.cpp's files do not hold.
func (t Type) BlockSize() (values, bytes int, ok bool) {
	switch t {
	case F32:
		return 1, 4, true
	case F16:
		return 1, 2, true
	case Q4_0:
		return 32, 18, true
	case Q4_1:
		return 32, 20, true
	case Q5_0:
		return 32, 22, true
	case Q5_1:
		return 32, 24, true
	case Q8_0:
		return 32, 34, true
	}
	return 0, 0, false
}

// Quantized reports whether t stores 32-value blocks with scales (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0).
func (t Type) Quantized() bool {
	values, _, ok := t.BlockSize()
	return ok && values == 32
}

// HParams are the hyperparameters stored at the start of a model file.
type HParams struct {
	NVocab      int `json:"n_vocab"`
	NAudioCtx   int `json:"n_audio_ctx"`
	NAudioState int `json:"n_audio_state"`
	NAudioHead  int `json:"n_audio_head"`
	NAudioLayer int `json:"n_audio_layer"`
	NTextCtx    int `json:"n_text_ctx"`
	NTextState  int `json:"n_text_state"`
	NTextHead   int `json:"n_text_head"`
	NTextLayer  int `json:"n_text_layer"`
	NMels       int `json:"n_mels"`
	FType       int `json:"ftype"`
}

// Validate checks that the hyperparameters describe a Whisper model that
// replyd runs: every size in range, state widths that the heads divide and
// that the encoder and decoder share, 30 s windows, Whisper's vocabulary.
func (hp *HParams) Validate() error {
	for _, c := range []struct {
		name   string
		v, max int
	}{
		{"n_vocab", hp.NVocab, 1 << 20}, {"n_audio_ctx", hp.NAudioCtx, 1 << 16}, {"n_audio_state", hp.NAudioState, 1 << 14},
		{"n_audio_head", hp.NAudioHead, 1 << 10}, {"n_audio_layer", hp.NAudioLayer, 1 << 10},
		{"n_text_ctx", hp.NTextCtx, 1 << 16}, {"n_text_state", hp.NTextState, 1 << 14},
		{"n_text_head", hp.NTextHead, 1 << 10}, {"n_text_layer", hp.NTextLayer, 1 << 10}, {"n_mels", hp.NMels, 1 << 10},
	} {
		if c.v < 1 || c.v > c.max {
			return fmt.Errorf("hyperparameter %s = %d is out of range (1 to %d)", c.name, c.v, c.max)
		}
	}
	switch {
	case hp.NAudioState%hp.NAudioHead != 0 || hp.NTextState%hp.NTextHead != 0:
		return errors.New("state width is not a multiple of the head count")
	case hp.NAudioCtx != AudioCtx:
		return fmt.Errorf("n_audio_ctx = %d, want %d (30 s windows)", hp.NAudioCtx, AudioCtx)
	case hp.NAudioState != hp.NTextState:
		return fmt.Errorf("n_audio_state %d differs from n_text_state %d", hp.NAudioState, hp.NTextState)
	case hp.NVocab < MinVocab:
		return fmt.Errorf("n_vocab = %d is smaller than Whisper's %d", hp.NVocab, MinVocab)
	case hp.FType < 0:
		return fmt.Errorf("ftype = %d", hp.FType)
	}
	return nil
}

// Header is what precedes the tensors.
type Header struct {
	HParams HParams
	NFilter int       // filter bins per mel (Filters)
	Filters []float32 // [n_mels][NFilter]; nil unless read with keep
	Vocab   [][]byte  // the stored tokens, id = index; nil unless read with keep
	NTokens int       // how many tokens are stored
}

// Tensor is one tensor's header.
type Tensor struct {
	Name  string
	Type  Type
	Ne    []int // ne[0] varies fastest
	Bytes int64 // its data's size
}

// Reader reads one file's header, then its tensors one at a time. Every
// length it reads is checked against the bytes the file still has, so that
// no allocation exceeds the file's size.
type Reader struct {
	r     *bufio.Reader
	left  int64 // bytes not yet read
	off   int64
	err   error
	count int     // tensors read
	cur   *Tensor // the tensor whose data comes next
}

// NewReader reads a file of size bytes from src.
func NewReader(src io.Reader, size int64) *Reader {
	return &Reader{r: bufio.NewReaderSize(src, int(min(max(size, 16), 1<<20))), left: size}
}

func (r *Reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrFormat, r.off, fmt.Sprintf(format, args...))
	}
}

// need fails when fewer than n bytes are left.
func (r *Reader) need(n int64, what string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > r.left {
		r.fail("truncated: %s needs %d bytes, %d left", what, n, r.left)
		return false
	}
	return true
}

// read fills b.
func (r *Reader) read(b []byte, what string) bool {
	if !r.need(int64(len(b)), what) {
		return false
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.fail("read %s: %v", what, err)
		return false
	}
	r.left -= int64(len(b))
	r.off += int64(len(b))
	return true
}

func (r *Reader) i32() int {
	var b [4]byte
	if !r.read(b[:], "a field") {
		return 0
	}
	return int(int32(binary.LittleEndian.Uint32(b[:])))
}

// skip passes over n bytes.
func (r *Reader) skip(n int64, what string) {
	if !r.need(n, what) {
		return
	}
	for n > 0 {
		step := min(n, 1<<30)
		d, err := r.r.Discard(int(step))
		r.left -= int64(d)
		r.off += int64(d)
		n -= int64(d)
		if err != nil {
			r.fail("read %s: %v", what, err)
			return
		}
	}
}

// Header reads and checks everything before the tensors. With keep it
// keeps the filter bank and the vocabulary; without, it skips them.
func (r *Reader) Header(keep bool) (*Header, error) {
	h := &Header{}
	if m := r.i32(); r.err == nil && uint32(m) != Magic {
		r.fail("bad magic %#08x", uint32(m))
	}
	hp := &h.HParams
	for _, p := range []*int{&hp.NVocab, &hp.NAudioCtx, &hp.NAudioState, &hp.NAudioHead, &hp.NAudioLayer,
		&hp.NTextCtx, &hp.NTextState, &hp.NTextHead, &hp.NTextLayer, &hp.NMels, &hp.FType} {
		*p = r.i32()
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := hp.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	nMel, nFFT := r.i32(), r.i32()
	if r.err == nil && (nMel != hp.NMels || nFFT != Filters) {
		r.fail("mel filters are %d×%d, want %d×%d", nMel, nFFT, hp.NMels, Filters)
	}
	if n := int64(nMel) * int64(nFFT) * 4; keep {
		if r.need(n, "mel filters") {
			fb := make([]byte, n)
			if r.read(fb, "mel filters") {
				h.NFilter = nFFT
				h.Filters = make([]float32, nMel*nFFT)
				for i := range h.Filters {
					h.Filters[i] = math.Float32frombits(binary.LittleEndian.Uint32(fb[4*i:]))
				}
			}
		}
	} else {
		r.skip(n, "mel filters")
		h.NFilter = nFFT
	}
	nTok := r.i32()
	if r.err == nil && (nTok < 1 || nTok > hp.NVocab || int64(nTok)*4 > r.left) {
		r.fail("vocabulary of %d tokens for n_vocab %d", nTok, hp.NVocab)
	}
	if r.err == nil && keep {
		h.Vocab = make([][]byte, nTok)
	}
	for i := 0; i < nTok && r.err == nil; i++ {
		l := r.i32()
		if r.err == nil && (l < 0 || l > MaxTokenLen) {
			r.fail("token %d has length %d", i, l)
		}
		if keep {
			if r.need(int64(l), "a token") {
				b := make([]byte, l)
				r.read(b, "a token")
				h.Vocab[i] = b
			}
		} else {
			r.skip(int64(l), "a token")
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	h.NTokens = nTok
	return h, nil
}

// Next reads the next tensor's header; io.EOF at the end of the file. The
// tensor's data must then be read (Data) or skipped (Skip) before the next
// call. Names are unique per file: the caller that keeps them checks that
// (Next does not remember them).
func (r *Reader) Next() (*Tensor, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.cur != nil {
		r.Skip()
	}
	if r.left == 0 {
		return nil, io.EOF
	}
	if r.count >= MaxTensors {
		r.fail("more than %d tensors", MaxTensors)
		return nil, r.err
	}
	t := &Tensor{}
	nDims, nameLen := r.i32(), r.i32()
	t.Type = Type(r.i32())
	if r.err != nil {
		return nil, r.err
	}
	if nDims < 1 || nDims > maxDims {
		r.fail("tensor with %d dimensions", nDims)
		return nil, r.err
	}
	if nameLen < 1 || nameLen > MaxNameLen {
		r.fail("tensor name of %d bytes", nameLen)
		return nil, r.err
	}
	vals, bsz, ok := t.Type.BlockSize()
	if !ok {
		r.fail("tensor of unsupported type %d", int32(t.Type))
		return nil, r.err
	}
	elems := int64(1)
	for i := 0; i < nDims && r.err == nil; i++ {
		d := r.i32()
		if r.err == nil && (d < 1 || d > MaxDim || elems > (r.left+r.off)*8/int64(d)) {
			r.fail("tensor dimension %d does not fit in a file of %d bytes", d, r.left+r.off)
		}
		t.Ne = append(t.Ne, d)
		elems *= int64(max(d, 1))
	}
	name := make([]byte, nameLen)
	r.read(name, "a tensor name")
	if r.err != nil {
		return nil, r.err
	}
	t.Name = string(name)
	if t.Ne[0]%vals != 0 {
		r.fail("tensor %q: row of %d values is not a whole number of %s blocks", t.Name, t.Ne[0], t.Type)
		return nil, r.err
	}
	t.Bytes = elems / int64(vals) * int64(bsz)
	if t.Bytes > r.left {
		r.fail("truncated: tensor %q needs %d bytes, %d left", t.Name, t.Bytes, r.left)
		return nil, r.err
	}
	r.count++
	r.cur = t
	return t, nil
}

// Data reads the data of the tensor Next returned into dst, which holds
// exactly its Bytes.
func (r *Reader) Data(dst []byte) error {
	if r.err == nil && (r.cur == nil || int64(len(dst)) != r.cur.Bytes) {
		return errors.New("ggmlfile: Data without its tensor, or of the wrong size")
	}
	if r.read(dst, "tensor data") {
		r.cur = nil
	}
	if r.err != nil {
		return r.err
	}
	return nil
}

// Skip passes over the data of the tensor Next returned.
func (r *Reader) Skip() error {
	if r.cur != nil {
		r.skip(r.cur.Bytes, "tensor data")
		r.cur = nil
	}
	return r.err
}

// SizeName names a Whisper model's size by its encoder layer count, as
// whisper.cpp does (whisper.cpp's e_model from n_audio_layer: 4 tiny, 6
// base, 12 small, 24 medium, 32 large); "" for another count.
func SizeName(layers int) string {
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
	return ""
}
