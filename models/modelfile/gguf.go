package modelfile

import (
	"io"
	"os"
	"strings"
)

// GGUF value types (gguf.h).
const (
	ggufUint8 = iota
	ggufInt8
	ggufUint16
	ggufInt16
	ggufUint32
	ggufInt32
	ggufFloat32
	ggufBool
	ggufString
	ggufArray
	ggufUint64
	ggufInt64
	ggufFloat64
)

// scalarSize is the byte width of a scalar GGUF value type, 0 for others.
func scalarSize(t uint32) int64 {
	switch t {
	case ggufUint8, ggufInt8, ggufBool:
		return 1
	case ggufUint16, ggufInt16:
		return 2
	case ggufUint32, ggufInt32, ggufFloat32:
		return 4
	case ggufUint64, ggufInt64, ggufFloat64:
		return 8
	}
	return 0
}

// ggmlTypes are the tensor element types of ggml (ggml.h's enum ggml_type):
// name, values per block and bytes per block (ggml.c's type_traits).
var ggmlTypes = map[uint32]struct {
	name         string
	values, size int64
}{
	0: {"f32", 1, 4}, 1: {"f16", 1, 2}, 2: {"q4_0", 32, 18}, 3: {"q4_1", 32, 20},
	6: {"q5_0", 32, 22}, 7: {"q5_1", 32, 24}, 8: {"q8_0", 32, 34}, 9: {"q8_1", 32, 36},
	10: {"q2_K", 256, 84}, 11: {"q3_K", 256, 110}, 12: {"q4_K", 256, 144}, 13: {"q5_K", 256, 176},
	14: {"q6_K", 256, 210}, 15: {"q8_K", 256, 292}, 16: {"iq2_xxs", 256, 66}, 17: {"iq2_xs", 256, 74},
	18: {"iq3_xxs", 256, 98}, 19: {"iq1_s", 256, 50}, 20: {"iq4_nl", 32, 18}, 21: {"iq3_s", 256, 110},
	22: {"iq2_s", 256, 82}, 23: {"iq4_xs", 256, 136}, 24: {"i8", 1, 1}, 25: {"i16", 1, 2},
	26: {"i32", 1, 4}, 27: {"i64", 1, 8}, 28: {"f64", 1, 8}, 29: {"iq1_m", 256, 56},
	30: {"bf16", 1, 2}, 34: {"tq1_0", 256, 54}, 35: {"tq2_0", 256, 66}, 39: {"mxfp4", 32, 17},
}

// Bounds from ggml: GGML_MAX_DIMS and GGML_MAX_NAME (names shorter than 64
// bytes); the rest keep a hostile header from costing memory or time.
const (
	ggufMaxDims     = 4
	ggufMaxName     = 63
	ggufMaxKey      = 1 << 16
	ggufMaxKeyBytes = 16 << 20 // all keys together (kept to find duplicates)
	ggufMaxString   = 1 << 20  // a kept string value (the chat template)
	ggufMaxCount    = 1 << 20  // tensors or keys
	ggufDefaultAlgn = 32       // GGUF_DEFAULT_ALIGNMENT
)

// kept are the metadata keys whose values the check needs; every other
// value is skipped without being stored.
func kept(key string) bool {
	switch key {
	case "general.architecture", "general.name", "general.alignment", "tokenizer.chat_template":
		return true
	}
	return false
}

// GGUF is what engine/llm needs of a GGUF file's metadata before llama.cpp
// loads it: the chat template's text and the shape the KV cache takes
// ("ARCH.block_count", "ARCH.embedding_length",
// "ARCH.attention.head_count", "ARCH.attention.head_count_kv",
// "ARCH.attention.key_length", "ARCH.attention.value_length"; 0 when absent).
type GGUF struct {
	Info
	ChatTemplate string
	Layers       int
	Embd         int
	Heads        int
	KVHeads      int
	KeyLength    int // per-head key width; 0 means Embd/Heads
	ValueLength  int
}

// shapeKeys are the metadata keys, after "ARCH.", of GGUF's shape fields.
var shapeKeys = []string{"block_count", "embedding_length", "attention.head_count",
	"attention.head_count_kv", "attention.key_length", "attention.value_length"}

// ReadGGUF checks the GGUF file at path as CheckGGUF does and returns its
// metadata: the one GGUF parser, for the checks and for engine/llm alike.
func ReadGGUF(path string) (GGUF, error) {
	f, err := os.Open(path)
	if err != nil {
		return GGUF{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return GGUF{}, err
	}
	return readGGUF(f, st.Size())
}

// CheckGGUF checks a GGUF file the way llama.cpp's gguf reader would take
// it: magic, version 2 or 3, the key-value table, the tensor table (names,
// dimensions, types, offsets consecutive and aligned as gguf.cpp requires)
// and every tensor's data inside the file; then that the metadata names an
// architecture and holds a vocabulary (tokenizer.ggml.tokens). A missing
// chat template is a note, not a refusal.
func CheckGGUF(ra io.ReaderAt, size int64) (Info, error) {
	g, err := readGGUF(ra, size)
	return g.Info, err
}

func readGGUF(ra io.ReaderAt, size int64) (GGUF, error) {
	var g GGUF
	info := &g.Info
	*info = Info{Kind: KindLLM, Bytes: size, WeightTypes: map[string]int{}}
	r := newReader(ra, size)
	if m := r.fixed(4); r.err == nil && string(m) != "GGUF" {
		return g, invalid("not a GGUF file (magic %q)", m)
	}
	version := r.u32()
	if r.err == nil && (version < 2 || version > 3) {
		return g, invalid("unsupported GGUF version %d (2 and 3 are read)", version)
	}
	info.Version = int(version)
	nTensors, nKV := r.u64(), r.u64()
	if r.err != nil {
		return g, r.err
	}
	// A key-value pair takes at least 13 bytes, a tensor entry 29.
	if nKV > ggufMaxCount || int64(nKV)*13 > r.left() {
		return g, invalid("GGUF header claims %d metadata keys, more than the file can hold", nKV)
	}
	if nTensors > ggufMaxCount || int64(nTensors)*29 > r.left() {
		return g, invalid("GGUF header claims %d tensors, more than the file can hold", nTensors)
	}

	keys := map[string]bool{}
	keyBytes := 0
	strs := map[string]string{}
	nums := map[string]int{} // integer values of keys ending in a shapeKeys
	alignment := int64(ggufDefaultAlgn)
	for i := uint64(0); i < nKV && r.err == nil; i++ {
		kl := r.u64()
		key := string(r.bytes(int64(min(kl, 1<<62)), ggufMaxKey, "metadata key"))
		if r.err != nil {
			break
		}
		if key == "" {
			r.fail("metadata key %d is empty", i)
			break
		}
		if keys[key] {
			r.fail("metadata key %q appears twice", key)
			break
		}
		if keyBytes += len(key); keyBytes > ggufMaxKeyBytes {
			r.fail("metadata keys take more than %d bytes", ggufMaxKeyBytes)
			break
		}
		keys[key] = true
		typ := r.u32()
		switch {
		case r.err != nil:
		case typ == ggufString && kept(key):
			n := r.u64()
			strs[key] = string(r.bytes(int64(min(n, 1<<62)), ggufMaxString, key))
		case key == "general.alignment":
			if typ != ggufUint32 {
				r.fail("general.alignment has type %d, want uint32", typ)
				break
			}
			a := int64(r.u32())
			if r.err == nil && (a == 0 || a&(a-1) != 0) {
				r.fail("general.alignment %d is not a power of two", a)
			}
			alignment = a
		case scalarSize(typ) > 0 && shapeKey(key):
			var v uint64
			switch scalarSize(typ) {
			case 1:
				v = uint64(r.fixed(1)[0])
			case 2:
				b := r.fixed(2)
				v = uint64(b[0]) | uint64(b[1])<<8
			case 4:
				v = uint64(r.u32())
			default:
				v = r.u64()
			}
			if typ != ggufFloat32 && typ != ggufFloat64 && v <= 1<<31 {
				nums[key] = int(v)
			}
		case key == "tokenizer.ggml.tokens":
			if typ != ggufArray {
				r.fail("tokenizer.ggml.tokens has type %d, want an array", typ)
				break
			}
			n := r.skipArray(key)
			info.Vocab = int(n)
		default:
			r.skipValue(typ, key)
		}
	}
	if r.err != nil {
		return g, r.err
	}
	info.Arch = strs["general.architecture"]
	info.Name = strs["general.name"]
	if info.Arch == "" {
		return g, invalid("GGUF metadata has no general.architecture")
	}
	g.ChatTemplate = strs["tokenizer.chat_template"]
	a := info.Arch + "."
	g.Layers, g.Embd, g.Heads = nums[a+"block_count"], nums[a+"embedding_length"], nums[a+"attention.head_count"]
	g.KVHeads, g.KeyLength, g.ValueLength = nums[a+"attention.head_count_kv"], nums[a+"attention.key_length"], nums[a+"attention.value_length"]
	if strings.TrimSpace(g.ChatTemplate) != "" {
		info.ChatTemplate = true
	} else {
		info.Notes = append(info.Notes, "no tokenizer.chat_template: replyd will use ChatML")
	}
	if !keys[info.Arch+".block_count"] {
		info.Notes = append(info.Notes, "no "+info.Arch+".block_count in the metadata")
	}

	type tensor struct{ off, bytes int64 }
	names := map[string]bool{}
	tensors := make([]tensor, 0, nTensors)
	for i := uint64(0); i < nTensors && r.err == nil; i++ {
		nl := r.u64()
		name := string(r.bytes(int64(min(nl, 1<<62)), ggufMaxName, "tensor name"))
		if r.err != nil {
			break
		}
		if names[name] {
			r.fail("tensor %q appears twice", name)
			break
		}
		names[name] = true
		nDims := r.u32()
		if r.err == nil && (nDims < 1 || nDims > ggufMaxDims) {
			r.fail("tensor %q has %d dimensions (1 to %d)", name, nDims, ggufMaxDims)
			break
		}
		ne := make([]int64, nDims)
		elems := int64(1)
		for d := range ne {
			v := r.u64()
			if r.err != nil {
				break
			}
			// No ggml type stores more than 8 values per byte, so a
			// tensor of more elements than 8× the file cannot fit.
			if v < 1 || v > uint64(size)*8 || elems > size*8/int64(v) {
				r.fail("tensor %q: dimension %d = %d does not fit in a file of %d bytes", name, d, v, size)
				break
			}
			ne[d] = int64(v)
			elems *= int64(v)
		}
		typ := r.u32()
		off := r.u64()
		if r.err != nil {
			break
		}
		tt, ok := ggmlTypes[typ]
		if !ok {
			r.fail("tensor %q has unknown type %d", name, typ)
			break
		}
		if ne[0]%tt.values != 0 {
			r.fail("tensor %q: row of %d values is not a whole number of %s blocks of %d", name, ne[0], tt.name, tt.values)
			break
		}
		if off > uint64(size) {
			r.fail("tensor %q: offset %d is past the end of the file", name, off)
			break
		}
		info.WeightTypes[tt.name]++
		tensors = append(tensors, tensor{int64(off), elems / tt.values * tt.size})
	}
	if r.err != nil {
		return g, r.err
	}
	info.Tensors = len(tensors)
	if info.Tensors == 0 {
		return g, invalid("GGUF file has no tensors")
	}
	dataStart := (r.off + alignment - 1) / alignment * alignment
	// gguf.cpp requires each tensor at the offset where the previous one
	// ends, padded to the alignment.
	var want int64
	for i, t := range tensors {
		if t.off != want {
			return g, invalid("tensor %d is at offset %d, want %d (tensors must follow each other)", i, t.off, want)
		}
		if end := dataStart + t.off + t.bytes; end > size {
			return g, invalid("truncated: tensor %d (%d bytes at offset %d) ends at byte %d, the file has %d",
				i, t.bytes, dataStart+t.off, end, size)
		}
		want = t.off + (t.bytes+alignment-1)/alignment*alignment
	}
	if info.Vocab == 0 {
		return g, invalid("GGUF metadata has no vocabulary (tokenizer.ggml.tokens)")
	}
	return g, nil
}

// shapeKey reports whether key is "ARCH." and one of shapeKeys, for any
// ARCH (the architecture may come later in the table).
func shapeKey(key string) bool {
	for _, k := range shapeKeys {
		if arch, ok := strings.CutSuffix(key, "."+k); ok && arch != "" && !strings.Contains(arch, ".") {
			return true
		}
	}
	return false
}

// skipValue passes over one value of type typ.
func (r *reader) skipValue(typ uint32, what string) {
	switch {
	case typ == ggufString:
		n := r.u64()
		r.skip(int64(min(n, 1<<62)), what)
	case typ == ggufArray:
		r.skipArray(what)
	case scalarSize(typ) > 0:
		r.skip(scalarSize(typ), what)
	default:
		r.fail("%s has unknown value type %d", what, typ)
	}
}

// skipArray passes over an array (of scalars or strings; GGUF arrays of
// arrays are refused, as llama.cpp refuses them) and returns its length.
func (r *reader) skipArray(what string) uint64 {
	et, n := r.u32(), r.u64()
	if r.err != nil {
		return 0
	}
	switch {
	case et == ggufString:
		if n > uint64(r.left())/8 {
			r.fail("%s: array of %d strings does not fit in what is left of the file", what, n)
			return 0
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			l := r.u64()
			r.skip(int64(min(l, 1<<62)), what)
		}
	case scalarSize(et) > 0:
		if n > uint64(r.left())/uint64(scalarSize(et)) {
			r.fail("%s: array of %d values does not fit in what is left of the file", what, n)
			return 0
		}
		r.skip(int64(n)*scalarSize(et), what)
	default:
		r.fail("%s: array of unsupported element type %d", what, et)
	}
	return n
}
