package llm

import "github.com/replyd/replyd/engine/modelfile"

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

// readGGUFInfo reads the metadata of a GGUF file with the models folder's
// own parser (modelfile.ReadGGUF, which checks the file the way llama.cpp's
// gguf reader takes it), so that a file llama.cpp would refuse is refused
// here with a reason, and the format is parsed in one place.
func readGGUFInfo(path string) (ggufInfo, error) {
	g, err := modelfile.ReadGGUF(path)
	if err != nil {
		return ggufInfo{}, err
	}
	return ggufInfo{Arch: g.Arch, Name: g.Name, ChatTemplate: g.ChatTemplate, Layers: g.Layers, Embd: g.Embd,
		Heads: g.Heads, KVHeads: g.KVHeads, KeyLength: g.KeyLength, ValueLength: g.ValueLength}, nil
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
