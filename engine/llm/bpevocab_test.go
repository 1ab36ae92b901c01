package llm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/replyd/replyd/internal/shareddata"
)

// qwenVocabModel writes a small model (1 layer, width 64) with Qwen2.5's
// real vocabulary: the synthesised Qwen2.5 shapes differ from it only in
// their dimensions.
func qwenVocabModel(t *testing.T) string {
	t.Helper()
	cfg := ModelConfig{Name: "qwen-vocab", Embd: 64, Heads: 4, KVHeads: 2, Layers: 1, FF: 128,
		Vocab: 151936, CtxTrain: 4096, RopeTheta: 1e6, Quant: "q8_0", TiedEmbeddings: true,
		OutputScale: 0.3, Seed: 7, Tokenizer: shareddata.QwenTokenizer(t), AddedTokens: QwenAddedTokens}
	p := filepath.Join(t.TempDir(), "qwen-vocab.gguf")
	if err := WriteModel(p, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQwenTokenizer loads a model written with Qwen's tokenizer.json through
// replyd's engine and checks that llama.cpp tokenizes fixed texts (ASCII,
// contractions, digits, accents, CJK, emoji, whitespace runs, ChatML
// markers) to exactly the ids Qwen's tokenizer gives them, as computed by an
// independent implementation (testdata/qwen_tokens.json says which); and that
// the vocabulary has Qwen2.5's size, padding and special tokens, and
// generates.
func TestQwenTokenizer(t *testing.T) {
	p := qwenVocabModel(t)
	var gold struct {
		Samples []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"samples"`
	}
	b, err := os.ReadFile(filepath.Join("testdata", "qwen_tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &gold); err != nil || len(gold.Samples) == 0 {
		t.Fatalf("testdata/qwen_tokens.json: %v", err)
	}
	e, err := Open(Options{ModelPath: p, MaxReplyTokens: 8, PrefixCacheMiB: 1, ContextPerSeq: 1024, MaxCandidates: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, s := range gold.Samples {
		got, err := e.model.Tokenize(s.Text, true, true)
		if err != nil {
			t.Fatalf("%q: %v", s.Text, err)
		}
		if d := cmp.Diff(s.IDs, got); d != "" {
			t.Errorf("tokens of %q (-tokenizer.json +llama.cpp):\n%s", s.Text, d)
		}
	}
	if n := e.model.NumVocab(); n != 151936 {
		t.Errorf("vocabulary of %d tokens, want Qwen2.5's 151936", n)
	}
	// Control and padding tokens render as nothing, a user-defined one as its text.
	for id, want := range map[int]string{9707: "Hello", 151645: "", 151657: "<tool_call>", 151665: ""} {
		if got := string(e.vocab.piece(id)); got != want {
			t.Errorf("piece of %d is %q, want %q", id, got, want)
		}
	}
	if !e.vocab.isStop(151645) || !e.vocab.isStop(151643) {
		t.Error("<|im_end|> and <|endoftext|> must end a reply")
	}
	g := mustGenerate(t, e, request(2, 1))
	if len(g.Candidates) == 0 || g.PromptTokens == 0 {
		t.Fatalf("generation %+v", g)
	}
}
