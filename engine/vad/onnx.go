package vad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file reads the part of the ONNX format (onnx/onnx.proto, IR version
// 3 and later) that a Silero model uses: the graph, its nodes with their
// attributes (including the subgraphs of If), and the tensors stored as
// initializers or Constant nodes. It decodes the protobuf wire format
// directly: the field numbers are those of onnx.proto.

// errFormat marks a file that is not a model this package can read.
var errFormat = errors.New("not a Silero VAD ONNX model")

// onnxModel is a parsed ModelProto.
type onnxModel struct {
	irVersion int64
	opset     int64 // version of the default ("" or "ai.onnx") domain
	graph     *onnxGraph
}

// onnxGraph is a parsed GraphProto.
type onnxGraph struct {
	name    string
	nodes   []*onnxNode
	inits   map[string]*tensor
	inputs  []string
	outputs []string
}

// onnxNode is a parsed NodeProto.
type onnxNode struct {
	name    string
	op      string
	domain  string
	inputs  []string
	outputs []string
	attrs   map[string]*onnxAttr
}

// onnxAttr is a parsed AttributeProto; the fields that apply to its type
// are set.
type onnxAttr struct {
	f    float32
	i    int64
	s    []byte
	t    *tensor
	g    *onnxGraph
	fs   []float32
	ints []int64
}

// tensor is a dense float32 or int64 tensor.
type tensor struct {
	dims []int
	f    []float32 // FLOAT data
	i    []int64   // INT64 (and INT32, BOOL) data
}

// size is the product of the dims.
func (t *tensor) size() int {
	n := 1
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// ONNX TensorProto data types used here.
const (
	dtFloat = 1
	dtInt32 = 6
	dtInt64 = 7
	dtBool  = 9
)

// fieldFunc handles one field of a message: its number, wire type and
// value (raw bytes for length-delimited fields, the varint or fixed value
// otherwise).
type fieldFunc func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error

// walk calls f for each field of the protobuf message b.
func walk(b []byte, f fieldFunc) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad protobuf tag", errFormat)
		}
		b = b[n:]
		var v uint64
		var val []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			val, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: bad protobuf field %d", errFormat, num)
		}
		b = b[n:]
		if err := f(num, typ, v, val); err != nil {
			return err
		}
	}
	return nil
}

// varints appends the int64 values of a repeated int64 field, packed or not.
func varints(dst []int64, typ protowire.Type, v uint64, b []byte) ([]int64, error) {
	if typ == protowire.VarintType {
		return append(dst, int64(v)), nil
	}
	for len(b) > 0 {
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: bad packed varint", errFormat)
		}
		dst = append(dst, int64(x))
		b = b[n:]
	}
	return dst, nil
}

// floats appends the values of a repeated float field, packed or not.
func floats(dst []float32, typ protowire.Type, v uint64, b []byte) ([]float32, error) {
	if typ == protowire.Fixed32Type {
		return append(dst, math.Float32frombits(uint32(v))), nil
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: bad packed float", errFormat)
	}
	for i := 0; i < len(b); i += 4 {
		dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return dst, nil
}

// parseModel decodes a ModelProto.
func parseModel(b []byte) (*onnxModel, error) {
	m := &onnxModel{opset: -1}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, val []byte) error {
		switch num {
		case 1: // ir_version
			m.irVersion = int64(v)
		case 7: // graph
			g, err := parseGraph(val, 0)
			if err != nil {
				return err
			}
			m.graph = g
		case 8: // opset_import
			var domain string
			var version int64
			err := walk(val, func(num protowire.Number, _ protowire.Type, v uint64, val []byte) error {
				switch num {
				case 1:
					domain = string(val)
				case 2:
					version = int64(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if domain == "" || domain == "ai.onnx" {
				m.opset = version
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.graph == nil {
		return nil, fmt.Errorf("%w: no graph", errFormat)
	}
	return m, nil
}

// maxDepth bounds the nesting of subgraphs.
const maxDepth = 4

// parseGraph decodes a GraphProto.
func parseGraph(b []byte, depth int) (*onnxGraph, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: subgraphs nested too deep", errFormat)
	}
	g := &onnxGraph{inits: map[string]*tensor{}}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, val []byte) error {
		switch num {
		case 1: // node
			n, err := parseNode(val, depth)
			if err != nil {
				return err
			}
			g.nodes = append(g.nodes, n)
		case 2:
			g.name = string(val)
		case 5: // initializer
			name, t, err := parseTensor(val)
			if err != nil {
				return err
			}
			g.inits[name] = t
		case 11, 12: // input, output (ValueInfoProto; name is field 1)
			var name string
			if err := walk(val, func(num protowire.Number, _ protowire.Type, _ uint64, val []byte) error {
				if num == 1 {
					name = string(val)
				}
				return nil
			}); err != nil {
				return err
			}
			if num == 11 {
				g.inputs = append(g.inputs, name)
			} else {
				g.outputs = append(g.outputs, name)
			}
		}
		return nil
	})
	return g, err
}

// parseNode decodes a NodeProto.
func parseNode(b []byte, depth int) (*onnxNode, error) {
	n := &onnxNode{attrs: map[string]*onnxAttr{}}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, val []byte) error {
		switch num {
		case 1:
			n.inputs = append(n.inputs, string(val))
		case 2:
			n.outputs = append(n.outputs, string(val))
		case 3:
			n.name = string(val)
		case 4:
			n.op = string(val)
		case 7:
			n.domain = string(val)
		case 5:
			name, a, err := parseAttr(val, depth)
			if err != nil {
				return err
			}
			n.attrs[name] = a
		}
		return nil
	})
	return n, err
}

// parseAttr decodes an AttributeProto.
func parseAttr(b []byte, depth int) (string, *onnxAttr, error) {
	a := &onnxAttr{}
	var name string
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, val []byte) error {
		var err error
		switch num {
		case 1:
			name = string(val)
		case 2:
			a.f = math.Float32frombits(uint32(v))
		case 3:
			a.i = int64(v)
		case 4:
			a.s = val
		case 5:
			_, a.t, err = parseTensor(val)
		case 6:
			a.g, err = parseGraph(val, depth+1)
		case 7:
			a.fs, err = floats(a.fs, typ, v, val)
		case 8:
			a.ints, err = varints(a.ints, typ, v, val)
		}
		return err
	})
	return name, a, err
}

// maxTensor bounds the elements of one tensor (the Silero model's largest
// holds 66k floats).
const maxTensor = 1 << 24

// parseTensor decodes a TensorProto holding float32, int64, int32 or bool
// data, stored raw or in the typed fields.
func parseTensor(b []byte) (string, *tensor, error) {
	t := &tensor{}
	var name string
	var dtype int64
	var raw []byte
	var hasRaw bool
	var i32 []int64
	err := walk(b, func(num protowire.Number, typ protowire.Type, v uint64, val []byte) error {
		var err error
		switch num {
		case 1:
			var d []int64
			d, err = varints(nil, typ, v, val)
			for _, x := range d {
				if x < 0 || x > maxTensor {
					return fmt.Errorf("%w: tensor dimension %d", errFormat, x)
				}
				t.dims = append(t.dims, int(x))
			}
		case 2:
			dtype = int64(v)
		case 4:
			t.f, err = floats(t.f, typ, v, val)
		case 5:
			i32, err = varints(i32, typ, v, val)
		case 7:
			t.i, err = varints(t.i, typ, v, val)
		case 8:
			name = string(val)
		case 9:
			raw, hasRaw = val, true
		case 13, 14:
			if num == 13 || v != 0 {
				return fmt.Errorf("%w: tensor data stored outside the file", errFormat)
			}
		}
		return err
	})
	if err != nil {
		return "", nil, err
	}
	n := 1
	for _, d := range t.dims {
		n *= d
		if n > maxTensor {
			return "", nil, fmt.Errorf("%w: tensor %q too large", errFormat, name)
		}
	}
	switch dtype {
	case dtFloat:
		if hasRaw {
			if len(raw) != 4*n {
				return "", nil, fmt.Errorf("%w: tensor %q holds %d bytes, want %d", errFormat, name, len(raw), 4*n)
			}
			t.f, _ = floats(nil, protowire.BytesType, 0, raw)
		}
		if len(t.f) != n {
			return "", nil, fmt.Errorf("%w: tensor %q holds %d floats, want %d", errFormat, name, len(t.f), n)
		}
	case dtInt64, dtInt32, dtBool:
		if hasRaw {
			w := map[int64]int{dtInt64: 8, dtInt32: 4, dtBool: 1}[dtype]
			if len(raw) != w*n {
				return "", nil, fmt.Errorf("%w: tensor %q holds %d bytes, want %d", errFormat, name, len(raw), w*n)
			}
			t.i = make([]int64, n)
			for k := range t.i {
				switch w {
				case 8:
					t.i[k] = int64(binary.LittleEndian.Uint64(raw[8*k:]))
				case 4:
					t.i[k] = int64(int32(binary.LittleEndian.Uint32(raw[4*k:])))
				default:
					t.i[k] = int64(raw[k])
				}
			}
		} else if dtype != dtInt64 {
			t.i = i32
		}
		if len(t.i) != n {
			return "", nil, fmt.Errorf("%w: tensor %q holds %d integers, want %d", errFormat, name, len(t.i), n)
		}
	default:
		return "", nil, fmt.Errorf("%w: tensor %q has data type %d", errFormat, name, dtype)
	}
	return name, t, nil
}
