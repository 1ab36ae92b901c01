package llm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// ggufInfo is what Open needs from a model file before llama.cpp loads it.
type ggufInfo struct {
	Arch         string
	Name         string
	ChatTemplate string
	Layers       int
	Embd         int
	Heads        int
	KVHeads      int
	KeyLength    int // per-head key width; 0 means Embd/Heads
	ValueLength  int
}

// readGGUFInfo reads the header and metadata of a GGUF file. It rejects files
// that are not GGUF or are truncated, with an error saying why.
func readGGUFInfo(path string) (ggufInfo, error) {
	var info ggufInfo
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	r := &ggufReader{r: bufio.NewReaderSize(f, 1<<16)}
	var magic [4]byte
	if _, err := io.ReadFull(r.r, magic[:]); err != nil {
		return info, fmt.Errorf("not a GGUF file: %w", errTrunc(err))
	}
	if string(magic[:]) != "GGUF" {
		return info, fmt.Errorf("not a GGUF file (magic %q)", magic[:])
	}
	version := r.u32()
	if r.err == nil && (version < 2 || version > 3) {
		return info, fmt.Errorf("unsupported GGUF version %d", version)
	}
	nTensors := r.u64()
	nKV := r.u64()
	if r.err != nil {
		return info, fmt.Errorf("GGUF header: %w", errTrunc(r.err))
	}
	if nTensors > 1<<20 || nKV > 1<<20 {
		return info, fmt.Errorf("GGUF header: implausible counts (%d tensors, %d keys)", nTensors, nKV)
	}
	vals := map[string]any{}
	for i := uint64(0); i < nKV && r.err == nil; i++ {
		key := r.str()
		typ := r.u32()
		v := r.value(typ, 0)
		if r.err == nil {
			vals[key] = v
		}
	}
	if r.err != nil {
		return info, fmt.Errorf("GGUF metadata: %w", errTrunc(r.err))
	}
	str := func(k string) string { s, _ := vals[k].(string); return s }
	num := func(k string) int {
		switch v := vals[k].(type) {
		case uint32:
			return int(v)
		case int32:
			return int(v)
		case uint64:
			return int(v)
		case int64:
			return int(v)
		}
		return 0
	}
	info.Arch = str("general.architecture")
	if info.Arch == "" {
		return info, errors.New("GGUF metadata has no general.architecture")
	}
	info.Name = str("general.name")
	info.ChatTemplate = str("tokenizer.chat_template")
	a := info.Arch + "."
	info.Layers = num(a + "block_count")
	info.Embd = num(a + "embedding_length")
	info.Heads = num(a + "attention.head_count")
	info.KVHeads = num(a + "attention.head_count_kv")
	info.KeyLength = num(a + "attention.key_length")
	info.ValueLength = num(a + "attention.value_length")
	return info, nil
}

// kvBytesPerToken estimates the f16 KV cache bytes one token takes.
func (g ggufInfo) kvBytesPerToken() int {
	heads := max(g.Heads, 1)
	kv := g.KVHeads
	if kv == 0 {
		kv = heads
	}
	k, v := g.KeyLength, g.ValueLength
	if k == 0 {
		k = g.Embd / heads
	}
	if v == 0 {
		v = g.Embd / heads
	}
	return max(g.Layers, 1) * kv * (k + v) * 2
}

func errTrunc(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file is truncated")
	}
	return err
}

type ggufReader struct {
	r   *bufio.Reader
	err error
	buf [8]byte
}

func (r *ggufReader) read(n int) []byte {
	if r.err != nil {
		return r.buf[:n]
	}
	_, r.err = io.ReadFull(r.r, r.buf[:n])
	return r.buf[:n]
}

func (r *ggufReader) u32() uint32 { return binary.LittleEndian.Uint32(r.read(4)) }
func (r *ggufReader) u64() uint64 { return binary.LittleEndian.Uint64(r.read(8)) }

func (r *ggufReader) str() string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > 1<<26 {
		r.err = fmt.Errorf("implausible string length %d", n)
		return ""
	}
	b := make([]byte, n)
	_, r.err = io.ReadFull(r.r, b)
	return string(b)
}

// value reads one value of type typ; arrays are skipped and return nil.
func (r *ggufReader) value(typ uint32, depth int) any {
	switch typ {
	case ggufUint8, ggufInt8, ggufBool:
		return r.read(1)[0]
	case ggufUint16, ggufInt16:
		return binary.LittleEndian.Uint16(r.read(2))
	case ggufUint32:
		return r.u32()
	case ggufInt32:
		return int32(r.u32())
	case ggufFloat32:
		return math.Float32frombits(r.u32())
	case ggufUint64:
		return r.u64()
	case ggufInt64:
		return int64(r.u64())
	case ggufFloat64:
		return math.Float64frombits(r.u64())
	case ggufString:
		return r.str()
	case ggufArray:
		et := r.u32()
		n := r.u64()
		if depth > 2 || n > 1<<28 {
			r.err = fmt.Errorf("implausible array (type %d, %d elements)", et, n)
			return nil
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			if et == ggufString {
				m := r.u64()
				if r.err == nil {
					_, r.err = r.r.Discard(int(m))
				}
				continue
			}
			r.value(et, depth+1)
		}
		return nil
	}
	r.err = fmt.Errorf("unknown GGUF value type %d", typ)
	return nil
}
