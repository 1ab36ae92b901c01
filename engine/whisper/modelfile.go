package whisper

import (
	"fmt"
	"io"
	"os"

	"github.com/replyd/replyd/engine/whisper/ggmlfile"
)

// The file format's types, from the pure-Go parser that models/modelfile
// shares (ggmlfile).
type (
	// ggmlType is a tensor element type, numbered as ggml numbers them.
	ggmlType = ggmlfile.Type
	// HParams are the hyperparameters stored at the start of a model file.
	HParams = ggmlfile.HParams
)

// Tensor element types a whisper.cpp model may contain.
const (
	typeF32  = ggmlfile.F32
	typeF16  = ggmlfile.F16
	typeQ4_0 = ggmlfile.Q4_0
	typeQ4_1 = ggmlfile.Q4_1
	typeQ5_0 = ggmlfile.Q5_0
	typeQ5_1 = ggmlfile.Q5_1
	typeQ8_0 = ggmlfile.Q8_0
)

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
var errFormat = ggmlfile.ErrFormat

// parseGGML reads a whisper.cpp model from src, whose size is size bytes,
// through ggmlfile. Tensor data goes into memory from alloc (the Go heap
// when nil); on error the tensors read so far are handed to release (when
// not nil).
func parseGGML(src io.Reader, size int64, alloc func(int64) []byte, release func([]byte)) (_ *ggmlFile, err error) {
	r := ggmlfile.NewReader(src, size)
	g := &ggmlFile{tensors: map[string]*rawTensor{}}
	defer func() {
		if err != nil && release != nil {
			for _, t := range g.tensors {
				release(t.data)
			}
		}
	}()
	h, err := r.Header(true)
	if err != nil {
		return nil, err
	}
	g.hp, g.nFilter, g.filters, g.vocab = h.HParams, h.NFilter, h.Filters, h.Vocab
	for {
		t, err := r.Next()
		if err == io.EOF {
			return g, nil
		}
		if err != nil {
			return nil, err
		}
		if _, dup := g.tensors[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q appears twice", errFormat, t.Name)
		}
		var data []byte
		if alloc != nil {
			if data = alloc(t.Bytes); data == nil {
				return nil, fmt.Errorf("%w: tensor %q: cannot allocate %d bytes", errFormat, t.Name, t.Bytes)
			}
		} else {
			data = make([]byte, t.Bytes)
		}
		if err := r.Data(data); err != nil {
			if release != nil && alloc != nil {
				release(data)
			}
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		g.tensors[t.Name] = &rawTensor{name: t.Name, typ: t.Type, ne: t.Ne, data: data}
		g.order = append(g.order, t.Name)
	}
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
