package llm

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Token types of a GGUF vocabulary that the byte-level BPE writer uses
// besides tokNormal and tokControl (llama.cpp's llama_token_type).
const (
	tokUserDefined = 4
	tokUnused      = 5
)

// bpeVocab is a byte-level BPE vocabulary (GPT-2 style, as Qwen's) in the
// form GGUF stores it: one string and type per id up to the model's
// vocabulary size, and the merges in rank order, each "left right".
type bpeVocab struct {
	tokens []string
	types  []int32
	merges []string
	// bos, eos and pad are the ids of <|endoftext|> and <|im_end|> as
	// Qwen2.5-Instruct's GGUF files name them.
	bos, eos, pad int
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json the writer reads.
type tokenizerJSON struct {
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]int    `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
}

// readBPEVocab reads a Hugging Face tokenizer.json of model type BPE and
// returns the GGUF vocabulary of size size: the BPE tokens at their ids, the
// first added tokens after them (special ones and those that look special,
// <|...|>, as control tokens, the others user-defined, as llama.cpp's
// convert_hf_to_gguf.py marks them), and "[PADn]" tokens of type unused up
// to size. Merges may be "a b" strings or ["a", "b"] pairs (both forms exist
// in published files). It fails when ids are not dense, when the added
// tokens do not follow the BPE ones, or when they do not fit in size.
func readBPEVocab(path string, size, added int) (bpeVocab, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return bpeVocab{}, fmt.Errorf("tokenizer: %w", err)
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(b, &tj); err != nil {
		return bpeVocab{}, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return bpeVocab{}, fmt.Errorf("tokenizer %s: model type %q, want BPE", path, tj.Model.Type)
	}
	n := len(tj.Model.Vocab)
	if added > len(tj.AddedTokens) {
		return bpeVocab{}, fmt.Errorf("tokenizer %s: %d added tokens, want at least %d", path, len(tj.AddedTokens), added)
	}
	if n+added > size {
		return bpeVocab{}, fmt.Errorf("tokenizer %s: %d tokens and %d added tokens do not fit a vocabulary of %d", path, n, added, size)
	}
	v := bpeVocab{tokens: make([]string, size), types: make([]int32, size), bos: -1, eos: -1, pad: -1}
	for s, id := range tj.Model.Vocab {
		if id < 0 || id >= n || v.tokens[id] != "" {
			return bpeVocab{}, fmt.Errorf("tokenizer %s: token ids are not 0..%d", path, n-1)
		}
		v.tokens[id] = s
		v.types[id] = tokNormal
	}
	for i, a := range tj.AddedTokens[:added] {
		if a.ID != n+i {
			return bpeVocab{}, fmt.Errorf("tokenizer %s: added token %q has id %d, want %d", path, a.Content, a.ID, n+i)
		}
		v.tokens[a.ID] = a.Content
		v.types[a.ID] = tokUserDefined
		if a.Special || (strings.HasPrefix(a.Content, "<|") && strings.HasSuffix(a.Content, "|>")) {
			v.types[a.ID] = tokControl
		}
		switch a.Content {
		case "<|endoftext|>":
			v.bos, v.pad = a.ID, a.ID
		case "<|im_end|>":
			v.eos = a.ID
		}
	}
	for id := n + added; id < size; id++ {
		v.tokens[id] = fmt.Sprintf("[PAD%d]", id)
		v.types[id] = tokUnused
	}
	if v.bos < 0 || v.eos < 0 {
		return bpeVocab{}, fmt.Errorf("tokenizer %s: no <|endoftext|> or <|im_end|> among the first %d added tokens", path, added)
	}
	v.merges = make([]string, len(tj.Model.Merges))
	for i, raw := range tj.Model.Merges {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			v.merges[i] = s
			continue
		}
		var pair []string
		if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
			return bpeVocab{}, fmt.Errorf("tokenizer %s: merge %d is neither \"a b\" nor [a, b]", path, i)
		}
		v.merges[i] = pair[0] + " " + pair[1]
	}
	return v, nil
}
