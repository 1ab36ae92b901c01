package modelfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/testutil"
)

// ggufFile builds a small GGUF file: a few metadata keys (mutated by kv)
// and two f32 tensors.
type ggufBuilder struct {
	b        bytes.Buffer
	noVocab  bool
	noTmpl   bool
	noArch   bool
	badOff   bool
	typ      uint32
	dim0     uint64
	version  uint32
	nTensors uint64
}

func (g *ggufBuilder) u32(v uint32) { binary.Write(&g.b, binary.LittleEndian, v) }
func (g *ggufBuilder) u64(v uint64) { binary.Write(&g.b, binary.LittleEndian, v) }
func (g *ggufBuilder) str(s string) { g.u64(uint64(len(s))); g.b.WriteString(s) }

func (g *ggufBuilder) build() []byte {
	if g.version == 0 {
		g.version = 3
	}
	if g.dim0 == 0 {
		g.dim0 = 8
	}
	type kv struct {
		k string
		f func()
	}
	kvs := []kv{
		{"general.name", func() { g.u32(ggufString); g.str("tiny") }},
		{"tiny.block_count", func() { g.u32(ggufUint32); g.u32(1) }},
		{"general.alignment", func() { g.u32(ggufUint32); g.u32(32) }},
		{"tokenizer.ggml.scores", func() {
			g.u32(ggufArray)
			g.u32(ggufFloat32)
			g.u64(3)
			g.u32(0)
			g.u32(0)
			g.u32(0)
		}},
	}
	if !g.noArch {
		kvs = append(kvs, kv{"general.architecture", func() { g.u32(ggufString); g.str("tiny") }})
	}
	if !g.noVocab {
		kvs = append(kvs, kv{"tokenizer.ggml.tokens", func() {
			g.u32(ggufArray)
			g.u32(ggufString)
			g.u64(3)
			g.str("a")
			g.str("b")
			g.str("<|im_end|>")
		}})
	}
	if !g.noTmpl {
		kvs = append(kvs, kv{"tokenizer.chat_template", func() { g.u32(ggufString); g.str("{{ messages }}") }})
	}
	g.b.WriteString("GGUF")
	g.u32(g.version)
	g.u64(2)
	g.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		g.str(kv.k)
		kv.f()
	}
	// token_embd: 8×3 f32 = 96 bytes at 0; output: dim0×2 of typ at 96.
	g.str("token_embd.weight")
	g.u32(2)
	g.u64(8)
	g.u64(3)
	g.u32(0)
	g.u64(0)
	g.str("output.weight")
	g.u32(2)
	g.u64(g.dim0)
	g.u64(2)
	g.u32(g.typ)
	if g.badOff {
		g.u64(100)
	} else {
		g.u64(96)
	}
	for g.b.Len()%32 != 0 {
		g.b.WriteByte(0)
	}
	g.b.Write(make([]byte, 96+8*2*4))
	return g.b.Bytes()
}

func validGGUF() []byte { return (&ggufBuilder{}).build() }

// whisperFile builds a small whisper.cpp ggml file with the tensors the
// checker requires (testutil.WhisperFile).
func whisperFile(mut func(hp []int32)) []byte { return testutil.WhisperFile(mut) }

func check(b []byte) (Info, error) { return Check(bytes.NewReader(b), int64(len(b))) }

func TestCheckAcceptsValidFiles(t *testing.T) {
	info, err := check(validGGUF())
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != KindLLM || info.Arch != "tiny" || info.Name != "tiny" || info.Tensors != 2 || info.Vocab != 3 ||
		!info.ChatTemplate || info.WeightTypes["f32"] != 2 || info.Version != 3 || len(info.Notes) != 0 {
		t.Errorf("gguf info %+v", info)
	}
	info, err = check(whisperFile(nil))
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != KindWhisper || info.Arch != "whisper" || info.Tensors != 9 || info.Vocab != 2 || info.WeightTypes["f32"] != 9 {
		t.Errorf("whisper info %+v", info)
	}
	// A GGUF without a chat template is accepted with a note.
	info, err = check((&ggufBuilder{noTmpl: true}).build())
	if err != nil || info.ChatTemplate || len(info.Notes) != 1 || !strings.Contains(info.Notes[0], "ChatML") {
		t.Errorf("no template: %+v, %v", info, err)
	}
}

func TestCheckRefusesBadFiles(t *testing.T) {
	good, wgood := validGGUF(), whisperFile(nil)
	for _, c := range []struct {
		name, want string
		file       []byte
	}{
		{"empty", "too short", nil},
		{"zeros", "not a GGUF or whisper.cpp ggml file", make([]byte, 4096)},
		{"text", "not a GGUF or whisper.cpp ggml file", []byte("hello world, not a model")},
		{"gguf version", "unsupported GGUF version 9", (&ggufBuilder{version: 9}).build()},
		{"gguf no arch", "no general.architecture", (&ggufBuilder{noArch: true}).build()},
		{"gguf no vocab", "no vocabulary", (&ggufBuilder{noVocab: true}).build()},
		{"gguf unknown type", "unknown type 77", (&ggufBuilder{typ: 77}).build()},
		{"gguf partial block", "not a whole number of q4_0 blocks", (&ggufBuilder{typ: 2}).build()},
		{"gguf offset", "want 96", (&ggufBuilder{badOff: true}).build()},
		{"gguf huge dim", "does not fit", (&ggufBuilder{dim0: 1 << 40}).build()},
		{"gguf cut in tensor", "truncated: tensor 1", good[:len(good)-10]},
		{"gguf cut in keys", "more than the file can hold", good[:40]},
		{"gguf cut in a key", "truncated", good[:120]},
		{"gguf key count", "more than the file can hold", patch(good, 16, 1<<40)},
		{"gguf tensor count", "more than the file can hold", patch(good, 8, 1<<19)},
		{"gguf string length", "at most", patch(good, 24, 1<<40)},
		{"whisper vocab size", "n_vocab = 100 is smaller", whisperFile(func(hp []int32) { hp[0] = 100 })},
		{"whisper audio ctx", "n_audio_ctx = 1499", whisperFile(func(hp []int32) { hp[1] = 1499 })},
		{"whisper negative", "n_text_layer = -5 is out of range", whisperFile(func(hp []int32) { hp[8] = -5 })},
		{"whisper mels", "mel filters are 2×201, want 5×201", whisperFile(func(hp []int32) { hp[9] = 5 })},
		{"whisper cut in tensor", "truncated: tensor \"decoder.blocks.0.cross_attn.query.weight\" needs 64 bytes, 54 left", wgood[:len(wgood)-10]},
		{"whisper cut in filters", "truncated: mel filters", wgood[:100]},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := check(c.file)
			if err == nil {
				t.Fatalf("accepted")
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

// patch returns a copy of b with the uint64 at off set to v.
func patch(b []byte, off int, v uint64) []byte {
	c := append([]byte{}, b...)
	binary.LittleEndian.PutUint64(c[off:], v)
	return c
}

func TestCheckFileHashes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, []byte("GGUFxx"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, sum, err := CheckFile(p)
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("err %v", err)
	}
	if want := sha256.Sum256([]byte("GGUFxx")); sum != hex.EncodeToString(want[:]) {
		t.Errorf("sum %q", sum)
	}
	if _, _, err := CheckFile(t.TempDir()); err == nil {
		t.Error("a directory was accepted")
	}
}

func FuzzCheckGGUF(f *testing.F) {
	f.Add(validGGUF())
	f.Add((&ggufBuilder{noTmpl: true}).build())
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := CheckGGUF(bytes.NewReader(b), int64(len(b)))
		if err == nil && (info.Tensors == 0 || info.Vocab == 0 || info.Arch == "") {
			t.Fatalf("accepted an incomplete file: %+v", info)
		}
	})
}

func FuzzCheckWhisper(f *testing.F) {
	f.Add(whisperFile(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := CheckWhisper(bytes.NewReader(b), int64(len(b)))
		if err == nil && info.Tensors < len(whisperTensors) {
			t.Fatalf("accepted an incomplete file: %+v", info)
		}
	})
}

// TestReadGGUF: the metadata engine/llm takes from the one parser, the
// architecture's keys found though they come before general.architecture.
func TestReadGGUF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := os.WriteFile(p, (&ggufBuilder{}).build(), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.Arch != "tiny" || g.Name != "tiny" || g.ChatTemplate != "{{ messages }}" || g.Layers != 1 || g.Embd != 0 || g.Vocab != 3 || g.Tensors != 2 {
		t.Errorf("ReadGGUF = %+v", g)
	}
	if err := os.WriteFile(p, (&ggufBuilder{noVocab: true}).build(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadGGUF(p); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadGGUF of a file without a vocabulary: %v, want ErrInvalid", err)
	}
	if _, err := ReadGGUF(filepath.Join(t.TempDir(), "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadGGUF of a missing file: %v", err)
	}
}
