package whisper

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// ggmlMagic opens every whisper.cpp model file ("ggml" read as a
// little-endian int32).
const ggmlMagic = 0x67676d6c

// ggmlType is a tensor element type, numbered as ggml numbers them.
type ggmlType int32

// Tensor element types a whisper.cpp model may contain.
const (
	typeF32  ggmlType = 0
	typeF16  ggmlType = 1
	typeQ4_0 ggmlType = 2
	typeQ4_1 ggmlType = 3
	typeQ5_0 ggmlType = 6
	typeQ5_1 ggmlType = 7
	typeQ8_0 ggmlType = 8
)

// String returns ggml's name of the type.
func (t ggmlType) String() string {
	switch t {
	case typeF32:
		return "f32"
	case typeF16:
		return "f16"
	case typeQ4_0:
		return "q4_0"
	case typeQ4_1:
		return "q4_1"
	case typeQ5_0:
		return "q5_0"
	case typeQ5_1:
		return "q5_1"
	case typeQ8_0:
		return "q8_0"
	}
	return fmt.Sprintf("type%d", int32(t))
}

// blockSize returns the number of values per block and the bytes per block,
// or ok false for a type this package cannot read.
func (t ggmlType) blockSize() (values, bytes int, ok bool) {
	switch t {
	case typeF32:
		return 1, 4, true
	case typeF16:
		return 1, 2, true
	case typeQ4_0:
		return 32, 18, true
	case typeQ4_1:
		return 32, 20, true
	case typeQ5_0:
		return 32, 22, true
	case typeQ5_1:
		return 32, 24, true
	case typeQ8_0:
		return 32, 34, true
	}
	return 0, 0, false
}

// quantized reports whether t stores 32-value blocks with scales (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0).
func (t ggmlType) quantized() bool {
	values, _, ok := t.blockSize()
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

// rawTensor is one tensor as stored in the file.
type rawTensor struct {
	name string
	typ  ggmlType
	ne   []int // ne[0] varies fastest
	data []byte
}

// n returns the number of elements.
func (t *rawTensor) n() int {
	n := 1
	for _, v := range t.ne {
		n *= v
	}
	return n
}

// ggmlFile is the parsed content of a model file.
type ggmlFile struct {
	hp      HParams
	nFilter int       // mel filter bins per mel (n_fft/2+1)
	filters []float32 // [n_mels][nFilter]
	vocab   [][]byte  // stored tokens, id = index
	tensors map[string]*rawTensor
	order   []string
	// release frees tensor data that came from a non-Go allocator; nil
	// when the data is on the Go heap.
	release func([]byte)
	// arena holds the tensor data when it is not nil; it is freed last.
	arena *tensorArena
}

// errFormat is wrapped by every error that describes a malformed file.
var errFormat = errors.New("not a valid whisper.cpp ggml model")

// limits on header fields that keep a hostile file from asking for absurd
// allocations before the file-size check applies.
const (
	maxDim       = 1 << 20
	maxNameLen   = 1 << 10
	maxTokenLen  = 1 << 10
	maxTensorDim = 4
)

// reader reads little-endian fields and never hands out more bytes than the
// file still has, so every allocation is capped by the file size.
type reader struct {
	r     *bufio.Reader
	alloc func(int64) []byte // for tensor data; nil means make
	left  int64              // bytes not yet read
	off   int64
	err   error
	// pending is memory from alloc that a failed read has not handed over.
	pending []byte
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", errFormat, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) bytes(n int64) []byte {
	return r.bytesWith(n, nil)
}

// bytesWith reads n bytes into memory from alloc (make when nil).
func (r *reader) bytesWith(n int64, alloc func(int64) []byte) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.left {
		r.fail("truncated: need %d bytes, %d left", n, r.left)
		return nil
	}
	var b []byte
	if alloc != nil {
		if b = alloc(n); b == nil {
			r.fail("cannot allocate %d bytes", n)
			return nil
		}
	} else {
		b = make([]byte, n)
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.fail("read: %v", err)
		if alloc != nil {
			r.pending = b
		}
		return nil
	}
	r.left -= n
	r.off += n
	return b
}

func (r *reader) i32() int {
	b := r.bytes(4)
	if b == nil {
		return 0
	}
	return int(int32(binary.LittleEndian.Uint32(b)))
}

// parseGGML reads a whisper.cpp model from src, whose size is size bytes.
// Tensor data goes into memory from alloc (the Go heap when nil); on error
// the tensors read so far are handed to release (when not nil).
func parseGGML(src io.Reader, size int64, alloc func(int64) []byte, release func([]byte)) (_ *ggmlFile, err error) {
	r := &reader{r: bufio.NewReaderSize(src, 1<<20), left: size, alloc: alloc}
	g := &ggmlFile{tensors: map[string]*rawTensor{}}
	defer func() {
		if err != nil && release != nil {
			for _, t := range g.tensors {
				release(t.data)
			}
			if r.pending != nil {
				release(r.pending)
			}
		}
	}()
	if m := r.i32(); r.err == nil && uint32(m) != ggmlMagic {
		r.fail("bad magic %#08x", uint32(m))
	}
	hp := &g.hp
	for _, p := range []*int{&hp.NVocab, &hp.NAudioCtx, &hp.NAudioState, &hp.NAudioHead, &hp.NAudioLayer,
		&hp.NTextCtx, &hp.NTextState, &hp.NTextHead, &hp.NTextLayer, &hp.NMels, &hp.FType} {
		*p = r.i32()
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := hp.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", errFormat, err)
	}

	nMel, nFFT := r.i32(), r.i32()
	if r.err == nil && (nMel != hp.NMels || nFFT <= 0 || nFFT > maxDim) {
		r.fail("mel filters are %d×%d, want %d mels", nMel, nFFT, hp.NMels)
	}
	if fb := r.bytes(int64(nMel) * int64(nFFT) * 4); fb != nil {
		g.nFilter = nFFT
		g.filters = make([]float32, nMel*nFFT)
		for i := range g.filters {
			g.filters[i] = math.Float32frombits(binary.LittleEndian.Uint32(fb[4*i:]))
		}
	}

	nTok := r.i32()
	if r.err == nil && (nTok < 0 || nTok > hp.NVocab || int64(nTok)*4 > r.left) {
		r.fail("vocabulary of %d tokens for n_vocab %d", nTok, hp.NVocab)
	}
	if r.err == nil {
		g.vocab = make([][]byte, nTok)
	}
	for i := 0; i < nTok && r.err == nil; i++ {
		l := r.i32()
		if r.err == nil && (l < 0 || l > maxTokenLen) {
			r.fail("token %d has length %d", i, l)
		}
		g.vocab[i] = r.bytes(int64(l))
	}

	for r.err == nil && r.left > 0 {
		t := &rawTensor{}
		nDims, nameLen := r.i32(), r.i32()
		t.typ = ggmlType(r.i32())
		if r.err != nil {
			break
		}
		if nDims < 1 || nDims > maxTensorDim {
			r.fail("tensor with %d dimensions", nDims)
			break
		}
		if nameLen < 1 || nameLen > maxNameLen {
			r.fail("tensor name of %d bytes", nameLen)
			break
		}
		vals, bsz, ok := t.typ.blockSize()
		if !ok {
			r.fail("tensor of unsupported type %d", int32(t.typ))
			break
		}
		n := int64(1)
		for i := 0; i < nDims; i++ {
			d := r.i32()
			if r.err == nil && (d < 1 || d > maxDim*4) {
				r.fail("tensor dimension %d", d)
			}
			t.ne = append(t.ne, d)
			n *= int64(d)
			if n > size {
				r.fail("tensor of %d elements in a file of %d bytes", n, size)
			}
		}
		name := r.bytes(int64(nameLen))
		if r.err != nil {
			break
		}
		t.name = string(name)
		if t.ne[0]%vals != 0 {
			r.fail("tensor %q: row of %d values is not a whole number of %s blocks", t.name, t.ne[0], t.typ)
			break
		}
		if _, dup := g.tensors[t.name]; dup {
			r.fail("tensor %q appears twice", t.name)
			break
		}
		t.data = r.bytesWith(n/int64(vals)*int64(bsz), r.alloc)
		if r.err != nil {
			r.err = fmt.Errorf("tensor %q: %w", t.name, r.err)
			break
		}
		g.tensors[t.name] = t
		g.order = append(g.order, t.name)
	}
	if r.err != nil {
		return nil, r.err
	}
	return g, nil
}

// validate checks that the hyperparameters describe a model this package
// can run.
func (hp *HParams) validate() error {
	pos := func(name string, v, max int) error {
		if v < 1 || v > max {
			return fmt.Errorf("%s = %d is out of range", name, v)
		}
		return nil
	}
	for _, c := range []struct {
		name   string
		v, max int
	}{
		{"n_vocab", hp.NVocab, 1 << 20}, {"n_audio_ctx", hp.NAudioCtx, 1 << 16}, {"n_audio_state", hp.NAudioState, 1 << 14},
		{"n_audio_head", hp.NAudioHead, 1 << 10}, {"n_audio_layer", hp.NAudioLayer, 1 << 10},
		{"n_text_ctx", hp.NTextCtx, 1 << 16}, {"n_text_state", hp.NTextState, 1 << 14},
		{"n_text_head", hp.NTextHead, 1 << 10}, {"n_text_layer", hp.NTextLayer, 1 << 10}, {"n_mels", hp.NMels, 1 << 10},
	} {
		if err := pos(c.name, c.v, c.max); err != nil {
			return err
		}
	}
	if hp.NAudioState%hp.NAudioHead != 0 || hp.NTextState%hp.NTextHead != 0 {
		return fmt.Errorf("state width is not a multiple of the head count")
	}
	if hp.NAudioCtx != windowFrames/2 {
		return fmt.Errorf("n_audio_ctx = %d, want %d (30 s windows)", hp.NAudioCtx, windowFrames/2)
	}
	if hp.NAudioState != hp.NTextState {
		return fmt.Errorf("n_audio_state %d differs from n_text_state %d", hp.NAudioState, hp.NTextState)
	}
	if hp.NVocab < 51864 {
		return fmt.Errorf("n_vocab = %d is smaller than Whisper's 51864", hp.NVocab)
	}
	if hp.FType < 0 {
		return fmt.Errorf("ftype = %d", hp.FType)
	}
	return nil
}

// readGGMLFile opens and parses path.
func readGGMLFile(path string) (*ggmlFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// The tensors go into one arena of huge pages (huge.go) where it can be
	// had.
	alloc, release := cAlloc, cFree
	arena := newTensorArena(st.Size())
	if arena != nil {
		alloc, release = arena.alloc, arena.release
	}
	g, err := parseGGML(f, st.Size(), alloc, release)
	if err != nil {
		arena.free()
		return nil, err
	}
	g.release = release
	g.arena = arena
	return g, nil
}
