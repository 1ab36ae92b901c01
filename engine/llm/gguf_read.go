package llm

import "github.com/replyd/replyd/models/modelfile"

// readGGUFInfo reads what Open needs of a GGUF file before llama.cpp loads
// it with the models folder's own parser (modelfile.ReadGGUF, which checks
// the file the way llama.cpp's gguf reader takes it), so that a file
// llama.cpp would refuse is refused here with a reason, and the format is
// parsed in one place.
func readGGUFInfo(path string) (modelfile.GGUF, error) {
	return modelfile.ReadGGUF(path)
}

// kvBytesPerToken estimates the f16 KV cache bytes one token of the model
// g takes.
func kvBytesPerToken(g modelfile.GGUF) int {
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
