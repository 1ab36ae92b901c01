package llm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
)

// ggml tensor types the generator writes.
const (
	ggmlTypeF32  = 0
	ggmlTypeF16  = 1
	ggmlTypeQ4_0 = 2
	ggmlTypeQ8_0 = 8
)

// SentencePiece token types (llama.cpp's llama_token_type).
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokByte    = 6
)

// chatMLTemplate is the Jinja chat template written into generated models.
// llama.cpp recognises it as ChatML by its <|im_start|> marker.
const chatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

// ModelConfig describes a llama-architecture model for WriteModel. Weights are
// deterministic pseudo-random numbers derived from Seed, so the same config
// always writes the same file.
type ModelConfig struct {
	Name      string
	Embd      int // embedding width; a multiple of 32 for q8_0
	Heads     int
	KVHeads   int
	Layers    int
	FF        int // feed-forward width; a multiple of 32 for q8_0
	Vocab     int // total vocabulary size, at least the fixed tokens (specials, 256 bytes, word pieces)
	CtxTrain  int
	RopeTheta float32
	// Quant is "f32", "f16", "q8_0" or "q4_0" for the 2-D weight matrices;
	// norms are always f32.
	Quant string
	// TiedEmbeddings omits output.weight so llama.cpp reuses token_embd.
	TiedEmbeddings bool
	// OutputScale is the standard deviation of output.weight (or of the
	// embedding when tied). Larger values give peakier next-token
	// distributions. Zero means 0.02.
	OutputScale float32
	Seed        uint64
	// Tokenizer, when set, is the path of a Hugging Face tokenizer.json of
	// byte-level BPE (Qwen's, fetched by scripts/qwen-tokenizer.sh): the
	// model then gets that vocabulary (tokenizer.ggml.model gpt2,
	// pre-tokenizer qwen2, merges), tokenizing text as the real model does,
	// padded to Vocab. Empty writes the made-up SentencePiece vocabulary.
	Tokenizer string
	// AddedTokens is how many of the tokenizer's added tokens (the special
	// ones after the BPE tokens) the vocabulary keeps: Qwen2.5 has 22.
	AddedTokens int
}

// DemoModelConfig is the tiny model WriteDemoModel writes: 2 layers of width
// 64 over a vocabulary of ChatML specials, the 256 byte tokens and a few
// hundred English word pieces.
func DemoModelConfig() ModelConfig {
	return ModelConfig{
		Name: "replyd-demo", Embd: 64, Heads: 4, KVHeads: 2, Layers: 2, FF: 128,
		Vocab: 0, CtxTrain: 8192, RopeTheta: 10000, Quant: "f32",
		OutputScale: 0.35, Seed: 0x5eed,
	}
}

// QwenAddedTokens is the number of added tokens of Qwen2.5's vocabulary
// (<|endoftext|> to <|file_sep|>, ids 151643 to 151664); Qwen3's
// tokenizer.json has these first and four more after them.
const QwenAddedTokens = 22

// Qwen05BConfig has the dimensions of Qwen2.5-0.5B (24 layers, width 896,
// 14 query and 2 key/value heads, 151936 tokens, tied embeddings) in q8_0,
// written as a llama-architecture model with random weights. It is the
// benchmark model: about 530 MB. Set Tokenizer to give it Qwen's real
// vocabulary.
func Qwen05BConfig() ModelConfig {
	return ModelConfig{
		Name: "replyd-bench-qwen2.5-0.5b-shape", Embd: 896, Heads: 14, KVHeads: 2, Layers: 24, FF: 4864,
		Vocab: 151936, CtxTrain: 32768, RopeTheta: 1e6, Quant: "q8_0", TiedEmbeddings: true,
		OutputScale: 0.05, Seed: 0xbe7c, AddedTokens: QwenAddedTokens,
	}
}

// Qwen15BConfig has the dimensions of Qwen2.5-1.5B (28 layers, width 1536,
// 12 query and 2 key/value heads, feed-forward 8960, 151936 tokens, tied
// embeddings) in q8_0 with random weights: about 1.6 GB.
func Qwen15BConfig() ModelConfig {
	return ModelConfig{
		Name: "replyd-bench-qwen2.5-1.5b-shape", Embd: 1536, Heads: 12, KVHeads: 2, Layers: 28, FF: 8960,
		Vocab: 151936, CtxTrain: 32768, RopeTheta: 1e6, Quant: "q8_0", TiedEmbeddings: true,
		OutputScale: 0.05, Seed: 0x15b, AddedTokens: QwenAddedTokens,
	}
}

// WriteDemoModel writes the tiny demo model to path. It takes well under a
// second and the file is about 250 KB.
func WriteDemoModel(path string) error {
	return WriteModel(path, DemoModelConfig())
}

// demoWords seed the vocabulary with word pieces so decoded text looks like
// words and English prompts take about as many tokens as with a real
// tokenizer; every prefix of every word, lower case and capitalised, is a
// token, which SentencePiece merging needs to reach the whole word.
var demoWords = strings.Fields(`I you You yes Yes no No the The a A to To and And is Is it It that That what What how How are Are do
Do not Not can Can we We my My your Your me Me please Please thank Thank thanks Thanks okay Okay
sure Sure maybe Maybe later Later now Now water Water tea Tea coffee Coffee help Help want Want need
Need like Like love Love good Good bad Bad tired Tired hungry Hungry fine Fine great Great hello
Hello hi Hi bye Bye today Today tomorrow Tomorrow home Home music Music outside Outside inside
Inside sleep Sleep eat Eat drink Drink talk Talk feel Feel pain Pain happy Happy sad Sad more More
less Less stop Stop wait Wait go Go come Come here Here there There when When where Where who Who
why Why this This with With for For of Of on On in In at At be Be have Have will Will would Would
could Could time Time again Again right Right system System user User assistant Assistant model
Model about About biography Biography persona Persona profile Profile language Language reply Reply
English German French Spanish speak Speak as As turns Turns chat Chat theirs Theirs write Write next
Next thing Thing they They say Say one One short Short few Few words Words first First person Person
line Line quotes Quotes explanation Explanation suggest Suggest replies Replies uses Uses device
Device take Take part Part conversation Conversation morning Morning did Did well Well milk Milk
sugar Sugar shall Shall lunch Lunch sister Sister coming Coming three Three physio Physio rest Rest
years Years old Old has Has lives Lives likes Likes teacher Teacher former Former humour Humour dry
Dry kind Kind`)

// DemoWords returns the English words whose pieces every generated model's
// vocabulary holds: text made of them tokenizes to about one token a word.
func DemoWords() []string { return append([]string(nil), demoWords...) }

// vocab builds the token strings, scores and types of cfg's vocabulary.
func vocab(cfg ModelConfig) (toks []string, scores []float32, types []int32) {
	add := func(s string, score float32, t int32) {
		toks = append(toks, s)
		scores = append(scores, score)
		types = append(types, t)
	}
	seen := map[string]bool{}
	add("<unk>", 0, tokUnknown)
	add("<s>", 0, tokControl)
	add("</s>", 0, tokControl)
	add("<|im_start|>", 0, tokControl)
	add("<|im_end|>", 0, tokControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokByte)
	}
	for _, s := range toks {
		seen[s] = true
	}
	piece := func(s string) {
		if seen[s] {
			return
		}
		seen[s] = true
		// SentencePiece merges the pair whose result scores highest:
		// longer pieces score higher so words merge fully.
		add(s, float32(len([]rune(s)))-float32(len(toks))*1e-4, tokNormal)
	}
	for _, r := range "▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()" {
		piece(string(r))
	}
	for _, w := range demoWords {
		// With and without the word-start marker: a word after a newline
		// has none.
		for _, rs := range [][]rune{[]rune("▁" + w), []rune(w)} {
			for n := 2; n <= len(rs); n++ {
				piece(string(rs[:n]))
			}
		}
	}
	// Fill a larger vocabulary with synthetic unique pieces.
	for i := 0; len(toks) < cfg.Vocab; i++ {
		var sb strings.Builder
		sb.WriteString("▁")
		for n := i; ; n = n/26 - 1 {
			sb.WriteByte(byte('a' + n%26))
			if n < 26 {
				break
			}
		}
		sb.WriteString("q")
		piece(sb.String())
	}
	return toks, scores, types
}

// WriteModel writes a llama-architecture GGUF with a SentencePiece-style
// vocabulary (byte tokens, ChatML special tokens, word pieces), a ChatML
// chat template and deterministic random weights. It returns an error for
// inconsistent dimensions and removes a partly written file.
func WriteModel(path string, cfg ModelConfig) (err error) {
	if cfg.Embd <= 0 || cfg.Heads <= 0 || cfg.Layers <= 0 || cfg.FF <= 0 || cfg.Embd%cfg.Heads != 0 {
		return fmt.Errorf("write model %s: bad dimensions (embd %d, heads %d, layers %d, ff %d)", path, cfg.Embd, cfg.Heads, cfg.Layers, cfg.FF)
	}
	if cfg.KVHeads <= 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.Heads%cfg.KVHeads != 0 {
		return fmt.Errorf("write model %s: heads %d not a multiple of kv heads %d", path, cfg.Heads, cfg.KVHeads)
	}
	var wtype uint32
	switch cfg.Quant {
	case "", "f32":
		wtype = ggmlTypeF32
	case "f16":
		wtype = ggmlTypeF16
	case "q8_0", "q4_0":
		wtype = ggmlTypeQ8_0
		if cfg.Quant == "q4_0" {
			wtype = ggmlTypeQ4_0
		}
		if cfg.Embd%32 != 0 || cfg.FF%32 != 0 {
			return fmt.Errorf("write model %s: %s needs embd and ff multiples of 32", path, cfg.Quant)
		}
	default:
		return fmt.Errorf("write model %s: unknown quantisation %q", path, cfg.Quant)
	}
	if cfg.OutputScale == 0 {
		cfg.OutputScale = 0.02
	}
	if cfg.CtxTrain == 0 {
		cfg.CtxTrain = 4096
	}
	if cfg.RopeTheta == 0 {
		cfg.RopeTheta = 10000
	}
	var toks []string
	var scores []float32
	var types []int32
	var bpe bpeVocab
	if cfg.Tokenizer != "" {
		if bpe, err = readBPEVocab(cfg.Tokenizer, cfg.Vocab, cfg.AddedTokens); err != nil {
			return fmt.Errorf("write model %s: %w", path, err)
		}
		toks, types = bpe.tokens, bpe.types
	} else {
		toks, scores, types = vocab(cfg)
	}
	nVocab := len(toks)
	headDim := cfg.Embd / cfg.Heads
	kvDim := headDim * cfg.KVHeads

	type tensor struct {
		name  string
		dims  []uint64 // ne0 first
		typ   uint32
		std   float32
		ones  bool // norm weights: all 1
		bytes uint64
	}
	var ts []tensor
	add := func(name string, typ uint32, std float32, ones bool, dims ...int) {
		t := tensor{name: name, typ: typ, std: std, ones: ones}
		n := uint64(1)
		for _, d := range dims {
			t.dims = append(t.dims, uint64(d))
			n *= uint64(d)
		}
		switch typ {
		case ggmlTypeF32:
			t.bytes = n * 4
		case ggmlTypeF16:
			t.bytes = n * 2
		case ggmlTypeQ8_0:
			t.bytes = n / 32 * 34
		case ggmlTypeQ4_0:
			t.bytes = n / 32 * 18
		}
		ts = append(ts, t)
	}
	embStd := float32(0.5)
	if cfg.TiedEmbeddings {
		embStd = cfg.OutputScale
	}
	add("token_embd.weight", wtype, embStd, false, cfg.Embd, nVocab)
	add("output_norm.weight", ggmlTypeF32, 0, true, cfg.Embd)
	if !cfg.TiedEmbeddings {
		add("output.weight", wtype, cfg.OutputScale, false, cfg.Embd, nVocab)
	}
	attnStd := float32(1 / math.Sqrt(float64(cfg.Embd)))
	ffStd := float32(1 / math.Sqrt(float64(cfg.FF)))
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", ggmlTypeF32, 0, true, cfg.Embd)
		add(p+"attn_q.weight", wtype, attnStd, false, cfg.Embd, cfg.Embd)
		add(p+"attn_k.weight", wtype, attnStd, false, cfg.Embd, kvDim)
		add(p+"attn_v.weight", wtype, attnStd, false, cfg.Embd, kvDim)
		add(p+"attn_output.weight", wtype, attnStd, false, cfg.Embd, cfg.Embd)
		add(p+"ffn_norm.weight", ggmlTypeF32, 0, true, cfg.Embd)
		add(p+"ffn_gate.weight", wtype, attnStd, false, cfg.Embd, cfg.FF)
		add(p+"ffn_up.weight", wtype, attnStd, false, cfg.Embd, cfg.FF)
		add(p+"ffn_down.weight", wtype, ffStd, false, cfg.FF, cfg.Embd)
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write model %s: %w", path, cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	w := &ggufWriter{w: bufio.NewWriterSize(f, 1<<20)}

	arch := "llama"
	type kv struct {
		key string
		fn  func()
	}
	kvs := []kv{
		{"general.architecture", func() { w.str(arch) }},
		{"general.name", func() { w.str(cfg.Name) }},
		{"general.alignment", func() { w.u32v(ggufAlignment) }},
		{arch + ".context_length", func() { w.u32v(uint32(cfg.CtxTrain)) }},
		{arch + ".embedding_length", func() { w.u32v(uint32(cfg.Embd)) }},
		{arch + ".block_count", func() { w.u32v(uint32(cfg.Layers)) }},
		{arch + ".feed_forward_length", func() { w.u32v(uint32(cfg.FF)) }},
		{arch + ".attention.head_count", func() { w.u32v(uint32(cfg.Heads)) }},
		{arch + ".attention.head_count_kv", func() { w.u32v(uint32(cfg.KVHeads)) }},
		{arch + ".rope.dimension_count", func() { w.u32v(uint32(headDim)) }},
		{arch + ".rope.freq_base", func() { w.f32v(cfg.RopeTheta) }},
		{arch + ".attention.layer_norm_rms_epsilon", func() { w.f32v(1e-6) }},
		{arch + ".vocab_size", func() { w.u32v(uint32(nVocab)) }},
	}
	tokens := []kv{
		{"tokenizer.ggml.tokens", func() {
			w.u32(ggufArray)
			w.u32(ggufString)
			w.u64(uint64(nVocab))
			for _, s := range toks {
				w.rawStr(s)
			}
		}},
		{"tokenizer.ggml.token_type", func() {
			w.u32(ggufArray)
			w.u32(ggufInt32)
			w.u64(uint64(nVocab))
			for _, t := range types {
				w.u32(uint32(t))
			}
		}},
		{"tokenizer.ggml.add_bos_token", func() { w.u32(ggufBool); w.u8(0) }},
		{"tokenizer.ggml.add_eos_token", func() { w.u32(ggufBool); w.u8(0) }},
	}
	if cfg.Tokenizer != "" {
		// As convert_hf_to_gguf.py writes Qwen2.5-Instruct: byte-level
		// BPE with Qwen2's pre-tokenizer, no scores.
		kvs = append(kvs, kv{"tokenizer.ggml.model", func() { w.str("gpt2") }},
			kv{"tokenizer.ggml.pre", func() { w.str("qwen2") }})
		kvs = append(kvs, tokens...)
		kvs = append(kvs,
			kv{"tokenizer.ggml.merges", func() {
				w.u32(ggufArray)
				w.u32(ggufString)
				w.u64(uint64(len(bpe.merges)))
				for _, m := range bpe.merges {
					w.rawStr(m)
				}
			}},
			kv{"tokenizer.ggml.bos_token_id", func() { w.u32v(uint32(bpe.bos)) }},
			kv{"tokenizer.ggml.eos_token_id", func() { w.u32v(uint32(bpe.eos)) }},
			kv{"tokenizer.ggml.padding_token_id", func() { w.u32v(uint32(bpe.pad)) }})
	} else {
		kvs = append(kvs, kv{"tokenizer.ggml.model", func() { w.str("llama") }})
		kvs = append(kvs, tokens...)
		kvs = append(kvs,
			kv{"tokenizer.ggml.scores", func() {
				w.u32(ggufArray)
				w.u32(ggufFloat32)
				w.u64(uint64(nVocab))
				for _, s := range scores {
					w.u32(math.Float32bits(s))
				}
			}},
			kv{"tokenizer.ggml.bos_token_id", func() { w.u32v(1) }},
			kv{"tokenizer.ggml.eos_token_id", func() { w.u32v(4) }}, // <|im_end|>
			kv{"tokenizer.ggml.unknown_token_id", func() { w.u32v(0) }})
	}
	kvs = append(kvs, kv{"tokenizer.chat_template", func() { w.str(chatMLTemplate) }})

	w.write([]byte("GGUF"))
	w.u32(3)
	w.u64(uint64(len(ts)))
	w.u64(uint64(len(kvs)))
	for _, e := range kvs {
		w.rawStr(e.key)
		e.fn()
	}
	var off uint64
	for _, t := range ts {
		w.rawStr(t.name)
		w.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			w.u64(d)
		}
		w.u32(t.typ)
		w.u64(off)
		off += align(t.bytes)
	}
	w.pad()
	rng := xorshift(cfg.Seed | 1)
	for _, t := range ts {
		w.tensorData(t.typ, t.dims, t.std, t.ones, &rng)
		w.pad()
	}
	if w.err != nil {
		return fmt.Errorf("write model %s: %w", path, w.err)
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("write model %s: %w", path, err)
	}
	return nil
}

func align(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// xorshift is a tiny deterministic generator for weights.
type xorshift uint64

func (x *xorshift) next() uint64 {
	v := uint64(*x)
	v ^= v << 13
	v ^= v >> 7
	v ^= v << 17
	*x = xorshift(v)
	return v
}

type ggufWriter struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (w *ggufWriter) write(p []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.w.Write(p)
	w.n += uint64(len(p))
}

func (w *ggufWriter) u8(v byte) { w.write([]byte{v}) }
func (w *ggufWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:4], v)
	w.write(w.buf[:4])
}
func (w *ggufWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:8], v)
	w.write(w.buf[:8])
}
func (w *ggufWriter) rawStr(s string) { w.u64(uint64(len(s))); w.write([]byte(s)) }
func (w *ggufWriter) str(s string)    { w.u32(ggufString); w.rawStr(s) }
func (w *ggufWriter) u32v(v uint32)   { w.u32(ggufUint32); w.u32(v) }
func (w *ggufWriter) f32v(v float32)  { w.u32(ggufFloat32); w.u32(math.Float32bits(v)) }
func (w *ggufWriter) pad() {
	if r := w.n % ggufAlignment; r != 0 {
		w.write(make([]byte, ggufAlignment-r))
	}
}

// tensorData writes one tensor of uniformly distributed weights with the
// given standard deviation (or all ones).
func (w *ggufWriter) tensorData(typ uint32, dims []uint64, std float32, ones bool, rng *xorshift) {
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	// A uniform variable on [-a, a] has standard deviation a/sqrt(3).
	a := std * float32(math.Sqrt(3))
	uni := func() float32 {
		return (float32(rng.next()>>40)/float32(1<<24)*2 - 1) * a
	}
	switch typ {
	case ggmlTypeF32:
		b := make([]byte, 4)
		for i := uint64(0); i < n; i++ {
			v := float32(1)
			if !ones {
				v = uni()
			}
			binary.LittleEndian.PutUint32(b, math.Float32bits(v))
			w.write(b)
		}
	case ggmlTypeF16:
		b := make([]byte, 2)
		for i := uint64(0); i < n; i++ {
			v := float32(1)
			if !ones {
				v = uni()
			}
			binary.LittleEndian.PutUint16(b, f32ToF16(v))
			w.write(b)
		}
	case ggmlTypeQ8_0:
		// Each block is an f16 scale and 32 int8 quants uniform on
		// [-127, 127], so a weight is scale*q with the wanted spread.
		block := make([]byte, 34)
		binary.LittleEndian.PutUint16(block[:2], f32ToF16(a/127))
		for i := uint64(0); i < n/32; i++ {
			for j := 0; j < 32; j += 8 {
				r := rng.next()
				for k := 0; k < 8; k++ {
					q := int8(int(byte(r>>(8*k)))%255 - 127)
					block[2+j+k] = byte(q)
				}
			}
			w.write(block)
		}
	case ggmlTypeQ4_0:
		// Each block is an f16 scale and 32 4-bit quants uniform on 0..15,
		// a weight being scale*(q-8); uniform q has standard deviation
		// sqrt(255/12) = 4.61 steps.
		block := make([]byte, 18)
		binary.LittleEndian.PutUint16(block[:2], f32ToF16(std/4.61))
		for i := uint64(0); i < n/32; i++ {
			r := rng.next()
			for j := 0; j < 8; j++ {
				block[2+j] = byte(r >> (8 * j))
			}
			r = rng.next()
			for j := 0; j < 8; j++ {
				block[10+j] = byte(r >> (8 * j))
			}
			w.write(block)
		}
	}
}

// f32ToF16 converts a float32 in the normal half range to IEEE half
// precision, truncating the mantissa.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	return sign | uint16(exp)<<10 | uint16(mant>>13)
}
