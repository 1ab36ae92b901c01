package llm

// prefixSlot is one dialog sequence of the KV cache: the tokens it holds,
// for which dialog, and when it was last used.
type prefixSlot struct {
	seq    int
	dialog string // "" for a request without dialog_id
	tokens []int
	used   uint64
}

// prefixCache is the LRU of dialog sequences. Its size is fixed at Open from
// the memory bound, because llama.cpp allocates every sequence's KV cells up
// front. Only the owner goroutine uses it.
type prefixCache struct {
	slots []*prefixSlot
	clock uint64
}

// newPrefixCache makes n slots over sequences firstSeq..firstSeq+n-1.
func newPrefixCache(firstSeq, n int) *prefixCache {
	c := &prefixCache{}
	for i := 0; i < n; i++ {
		c.slots = append(c.slots, &prefixSlot{seq: firstSeq + i})
	}
	return c
}

// acquire returns the slot to evaluate tokens in and how many leading
// tokens it already holds. A dialog_id seen before gets its own slot back
// with the common prefix of its cached and new tokens, always leaving at
// least the last token to evaluate (its logits start the candidates).
// Otherwise the least recently used slot is taken, anonymous slots first,
// and nothing is reused.
func (c *prefixCache) acquire(dialog string, tokens []int) (*prefixSlot, int) {
	c.clock++
	if dialog != "" {
		for _, s := range c.slots {
			if s.dialog == dialog {
				s.used = c.clock
				n := 0
				for n < len(s.tokens) && n < len(tokens) && s.tokens[n] == tokens[n] {
					n++
				}
				return s, min(n, len(tokens)-1)
			}
		}
	}
	var victim *prefixSlot
	for _, s := range c.slots {
		if victim == nil || s.rank() < victim.rank() {
			victim = s
		}
	}
	victim.dialog = dialog
	victim.tokens = victim.tokens[:0]
	victim.used = c.clock
	return victim, 0
}

// rank orders eviction: unused slots, then anonymous ones, then dialogs,
// each by age.
func (s *prefixSlot) rank() uint64 {
	if s.dialog != "" {
		return s.used + 1<<62
	}
	return s.used
}

// release forgets the slot's dialog and tokens, making it the next victim.
func (c *prefixCache) release(s *prefixSlot) {
	s.dialog = ""
	s.tokens = s.tokens[:0]
	s.used = 0
}

// setTokens records that sequence seq holds exactly tokens. Sequences that
// are not dialog slots are ignored.
func (c *prefixCache) setTokens(seq int, tokens []int) {
	for _, s := range c.slots {
		if s.seq == seq {
			s.tokens = append(s.tokens[:0], tokens...)
			return
		}
	}
}
