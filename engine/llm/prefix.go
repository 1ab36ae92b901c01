package llm

// dialogEntry is one dialog's prompt KV cache saved outside llama.cpp: the
// tokens it holds and llama.cpp's serialised cells of them.
type dialogEntry struct {
	key    string
	tokens []int
	state  []byte
	used   uint64
}

// dialogCache keeps the KV cache of recent dialogs in Go memory, bounded in
// bytes, least recently used first out. The KV pool of the context holds one
// dialog's prompt (and its candidates) at a time; a dialog the engine
// switches away from is saved here and restored when its next turn comes,
// which costs a copy of its cells instead of evaluating its prompt again.
// Only the owner goroutine uses it.
type dialogCache struct {
	limit   int // bytes
	size    int
	clock   uint64
	entries map[string]*dialogEntry
}

func newDialogCache(limitBytes int) *dialogCache {
	return &dialogCache{limit: limitBytes, entries: map[string]*dialogEntry{}}
}

// get returns the entry of key, or nil.
func (c *dialogCache) get(key string) *dialogEntry {
	e := c.entries[key]
	if e != nil {
		c.clock++
		e.used = c.clock
	}
	return e
}

// put stores a copy of tokens with state under key, replacing what key held,
// and evicts the least recently used entries beyond the byte limit. A state
// larger than the whole limit is not kept.
func (c *dialogCache) put(key string, tokens []int, state []byte) {
	c.remove(key)
	if len(state) > c.limit {
		return
	}
	c.clock++
	c.entries[key] = &dialogEntry{key: key, tokens: append([]int(nil), tokens...), state: state, used: c.clock}
	c.size += len(state)
	for c.size > c.limit {
		var victim *dialogEntry
		for _, e := range c.entries {
			if victim == nil || e.used < victim.used {
				victim = e
			}
		}
		c.remove(victim.key)
	}
}

// holds reports whether key is stored with exactly tokens.
func (c *dialogCache) holds(key string, tokens []int) bool {
	e := c.entries[key]
	return e != nil && commonPrefix(e.tokens, tokens) == len(tokens) && len(e.tokens) == len(tokens)
}

func (c *dialogCache) remove(key string) {
	if e := c.entries[key]; e != nil {
		c.size -= len(e.state)
		delete(c.entries, key)
	}
}

// commonPrefix returns how many leading tokens a and b share.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
