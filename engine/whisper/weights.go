package whisper

import (
	"fmt"
	"math"
)

// weight is a matrix of rows×cols values (a linear layer's [out][in]) kept in
// the file's compact element type; f32 matrices are held as []float32.
type weight struct {
	typ        ggmlType
	rows, cols int
	rowBytes   int
	raw        []byte    // rows·rowBytes bytes when typ is not F32
	f32        []float32 // rows·cols values when typ is F32
}

// bytes returns the memory the weight occupies.
func (w *weight) bytes() int64 {
	return int64(len(w.raw)) + 4*int64(len(w.f32))
}

// row writes row r of w to dst as float32.
func (w *weight) row(r int, dst []float32) {
	if w.typ == typeF32 {
		copy(dst, w.f32[r*w.cols:(r+1)*w.cols])
		return
	}
	dequant(w.typ, w.raw[r*w.rowBytes:(r+1)*w.rowBytes], dst, w.cols)
}

// tensorSet looks tensors up by name and checks their shapes.
type tensorSet struct {
	g    *ggmlFile
	used map[string]bool
	kept map[string]bool // tensors whose file data a weight refers to
	err  error
}

func (s *tensorSet) get(name string, ne ...int) *rawTensor {
	if s.err != nil {
		return nil
	}
	t, ok := s.g.tensors[name]
	if !ok {
		s.err = fmt.Errorf("%w: tensor %q is missing", errFormat, name)
		return nil
	}
	// Shapes match when the sizes agree after dropping trailing 1s.
	trim := func(v []int) []int {
		for len(v) > 1 && v[len(v)-1] == 1 {
			v = v[:len(v)-1]
		}
		return v
	}
	a, b := trim(append([]int(nil), t.ne...)), trim(append([]int(nil), ne...))
	same := len(a) == len(b)
	for i := 0; same && i < len(a); i++ {
		same = a[i] == b[i]
	}
	if !same && !(len(ne) == 2 && ne[0] == 1 && len(a) == 1 && a[0] == ne[1]) {
		s.err = fmt.Errorf("%w: tensor %q has shape %v, want %v", errFormat, name, t.ne, ne)
		return nil
	}
	s.used[name] = true
	return t
}

// vec returns a tensor of n values as float32.
func (s *tensorSet) vec(name string, ne ...int) []float32 {
	t := s.get(name, ne...)
	if t == nil {
		return nil
	}
	out := make([]float32, t.n())
	vals, _, _ := t.typ.BlockSize()
	if vals > 1 || t.typ == typeF16 || t.typ == typeF32 {
		dequant(t.typ, t.data, out, len(out))
	}
	for _, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			s.err = fmt.Errorf("%w: tensor %q holds a non-finite value", errFormat, name)
			return nil
		}
	}
	return out
}

// mat returns the weight of a linear layer with in inputs and out outputs.
func (s *tensorSet) mat(name string, in, out int) *weight {
	t := s.get(name, in, out)
	if t == nil {
		return nil
	}
	w := &weight{typ: t.typ, rows: out, cols: in}
	vals, bsz, _ := t.typ.BlockSize()
	w.rowBytes = in / vals * bsz
	if t.typ == typeF32 {
		w.f32 = make([]float32, in*out)
		dequant(typeF32, t.data, w.f32, len(w.f32))
	} else {
		w.raw = t.data
		s.kept[name] = true
	}
	return w
}
