package llm

import (
	"bytes"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/steer"
)

// Steering: a steered request's candidates are sampled under a constraint
// (engine/steer) that the sampler enforces token by token. Before top-k,
// every token that would break the constraint is masked out, so each
// candidate meets it and none is wasted; the reply ends only where the
// constraint allows. The vocabulary is classified once, when the model is
// loaded: a trie of every token's bytes (a byte-level BPE word-start token
// carries its leading space, a SentencePiece one its '▁', which the piece
// renders as a space), and the tokens made of word characters only, which
// any word that has met its entry may go on with. The allowed tokens of a
// constraint state are found by walking the trie with the state, pruning
// at the first byte the constraint refuses; a state's mask is computed
// once per request and shared by its candidates.

// trieNode is one node of a tokenTrie: the tokens below it are
// order[lo:hi], those whose bytes end here order[lo:end].
type trieNode struct {
	lo, hi, end   int32
	child, nchild int32
	b             byte
}

// tokenTrie holds token pieces by their bytes.
type tokenTrie struct {
	nodes []trieNode
	order []int32 // token ids sorted by piece
}

func buildTrie(ids []int32, pieces [][]byte) *tokenTrie {
	order := slices.Clone(ids)
	sort.Slice(order, func(i, j int) bool { return bytes.Compare(pieces[order[i]], pieces[order[j]]) < 0 })
	t := &tokenTrie{order: order, nodes: []trieNode{{lo: 0, hi: int32(len(order))}}}
	type item struct{ node, depth int }
	queue := []item{{0, 0}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		n := &t.nodes[it.node]
		i := n.lo
		for i < n.hi && len(pieces[order[i]]) == it.depth {
			i++
		}
		n.end = i
		n.child = int32(len(t.nodes))
		lo, hi := i, n.hi
		for i := lo; i < hi; {
			b := pieces[order[i]][it.depth]
			j := i
			for j < hi && pieces[order[j]][it.depth] == b {
				j++
			}
			t.nodes = append(t.nodes, trieNode{lo: i, hi: j, b: b})
			queue = append(queue, item{len(t.nodes) - 1, it.depth + 1})
			i = j
		}
		// t.nodes may have moved.
		t.nodes[it.node].nchild = int32(len(t.nodes)) - t.nodes[it.node].child
	}
	return t
}

// steerVocab is the model's vocabulary classified for steering.
type steerVocab struct {
	n      int      // tokens (the length of a row of logits)
	pieces [][]byte // each token's bytes; nil for stop and empty tokens
	stops  []int32  // end-of-generation and control tokens
	all    *tokenTrie
	// wordOnly marks the tokens made of whole word characters only;
	// others is the trie of the rest.
	wordOnly []uint64
	others   *tokenTrie
}

func newSteerVocab(v vocabRef, n int) *steerVocab {
	sv := &steerVocab{n: n, pieces: make([][]byte, n), wordOnly: make([]uint64, (n+63)/64)}
	var all, others []int32
	for id := 0; id < n; id++ {
		if v.isStop(id) {
			sv.stops = append(sv.stops, int32(id))
			continue
		}
		p := v.piece(id)
		if len(p) == 0 {
			continue
		}
		sv.pieces[id] = p
		all = append(all, int32(id))
		if wordOnly(p) {
			sv.wordOnly[id>>6] |= 1 << (id & 63)
		} else {
			others = append(others, int32(id))
		}
	}
	sv.all = buildTrie(all, sv.pieces)
	sv.others = buildTrie(others, sv.pieces)
	return sv
}

// wordOnly reports whether p is valid UTF-8 made of word runes only.
func wordOnly(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if !steer.IsWordRune(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// maskKey names a mask of one request: a constraint state, the tokens left
// when the reply must hurry to finish (else 0), and whether it is the
// healing first token.
type maskKey struct {
	st   steer.State
	left int
	heal bool
}

// steerRun is one steered request's constraint on the owner goroutine.
type steerRun struct {
	prog *steer.Program
	sv   *steerVocab
	// kept are the tokens of the forced text put into the prompt, and
	// keptText their bytes; start is the state after them.
	kept     []int
	keptText []byte
	start    steer.State
	// limit is the most tokens a candidate samples after the prompt.
	limit int
	// heal, when not nil, marks the tokens that begin with the rest of
	// the forced text: the first token must be one of them (token
	// healing) when any is allowed.
	heal  []uint64
	masks map[maskKey][]uint64
	// walked counts trie nodes visited and maskTime the time spent on
	// masks (tests and benchmarks).
	walked   int
	maskTime time.Duration
}

// newSteerRun compiles req's constraint and heals its forced text: the
// text up to its last word goes into the prompt as tokens, the rest is
// sampled under the constraint.
func (e *Engine) newSteerRun(s engine.Steer) (*steerRun, error) {
	prog, err := steer.Compile(s)
	if err != nil {
		return nil, engine.Errorf(engine.KindInternal, err, "invalid steering constraint")
	}
	sr := &steerRun{prog: prog, sv: e.steerVocab(), masks: map[maskKey][]uint64{}}
	sr.limit = max(e.opts.MaxReplyTokens, 4*prog.Words())
	if keep := prog.Heal(); keep != "" {
		toks, err := e.model.Tokenize(keep, false, false)
		if err != nil {
			return nil, engine.Errorf(engine.KindLLM, err, "cannot tokenize the steering prefix")
		}
		st, text, ok := steer.State{}, []byte(nil), true
		for _, t := range toks {
			p := sr.sv.pieces[t]
			var end bool
			if st, ok, end = prog.Feed(st, p); !ok || end || p == nil {
				ok = false
				break
			}
			text = append(text, p...)
		}
		if ok && !st.Partial() {
			sr.kept, sr.keptText, sr.start = toks, text, st
		}
	}
	rest := strings.TrimRightFunc(prog.Forced(), unicode.IsSpace)
	rest = strings.TrimPrefix(rest, strings.TrimLeftFunc(string(sr.keptText), unicode.IsSpace))
	if rest != "" {
		sr.heal = sr.sv.beginningWith([]byte(rest))
	}
	return sr, nil
}

// beginningWith returns the mask of the tokens whose bytes begin with b,
// nil when there are none.
func (sv *steerVocab) beginningWith(b []byte) []uint64 {
	o := sv.all.order
	lo := sort.Search(len(o), func(i int) bool { return bytes.Compare(sv.pieces[o[i]], b) >= 0 })
	hi := lo
	for hi < len(o) && bytes.HasPrefix(sv.pieces[o[hi]], b) {
		hi++
	}
	if lo == hi {
		return nil
	}
	m := make([]uint64, (sv.n+63)/64)
	for _, id := range o[lo:hi] {
		m[id>>6] |= 1 << (id & 63)
	}
	return m
}

// steerVocab returns the classified vocabulary.
func (e *Engine) steerVocab() *steerVocab { return e.sv }

// mask returns the tokens allowed in state st with left tokens still to
// sample (nil: every token), first for a candidate's first token.
func (sr *steerRun) mask(st steer.State, left int, first bool) []uint64 {
	p := sr.prog
	heal := first && sr.heal != nil
	if !heal && p.Unconstrained(st) {
		// Any token keeps the state and the reply may end there, so
		// closing needs no mask either (it would be a walk of the
		// whole trie that allows everything).
		return nil
	}
	closing := p.Need(st) > left-3
	k := maskKey{st: st, heal: heal}
	if closing {
		k.left = left
	}
	if m, ok := sr.masks[k]; ok {
		return m
	}
	m := make([]uint64, (sr.sv.n+63)/64)
	need := -1
	if closing {
		need = left - 1
	}
	trie := sr.sv.all
	if p.InFreeWord(st) {
		// Every word-only token may go on with the word: all of them
		// are allowed, when closing as long as the reply can still
		// end in time after them, which is the same for all of them
		// unless FreeWordNeed says otherwise.
		if n, ok := p.FreeWordNeed(st); !closing || ok {
			if !closing || n <= need {
				copy(m, sr.sv.wordOnly)
			}
			trie = sr.sv.others
		}
	}
	if p.CanEnd(st) {
		mark(m, sr.sv.stops)
	}
	sr.walk(trie, 0, st, need, m)
	if heal {
		var any uint64
		h := slices.Clone(m)
		for i := range h {
			h[i] &= sr.heal[i]
			any |= h[i]
		}
		if any != 0 {
			m = h
		}
	}
	sr.masks[k] = m
	return m
}

// walk marks in m the tokens below trie node ni that may follow state st;
// need >= 0 also asks that the reply can end within need more bytes
// (Program.Need) after the token.
func (sr *steerRun) walk(t *tokenTrie, ni int32, st steer.State, need int, m []uint64) {
	p := sr.prog
	n := &t.nodes[ni]
	for c := n.child; c < n.child+n.nchild; c++ {
		cn := &t.nodes[c]
		sr.walked++
		if cn.b == '\n' {
			if p.CanEnd(st) {
				mark(m, t.order[cn.lo:cn.hi])
			}
			continue
		}
		next, ok := p.Step(st, cn.b)
		if !ok {
			continue
		}
		if cn.end > cn.lo && (!next.Partial() || p.Unconstrained(next)) && (need < 0 || p.Need(next) <= need) {
			mark(m, t.order[cn.lo:cn.end])
		}
		if cn.nchild > 0 {
			sr.walk(t, c, next, need, m)
		}
	}
}

func mark(m []uint64, ids []int32) {
	for _, id := range ids {
		m[id>>6] |= 1 << (id & 63)
	}
}

// sampleMasked is sample with only the tokens of mask allowed (nil: all).
// ok is false when the mask allows none. The log-probability is still the
// token's under the unconstrained distribution: ranking compares
// candidates by what the model thinks of them.
func (s *sampler) sampleMasked(logits []float32, mask []uint64) (tok int, lp float64, ok bool) {
	if mask == nil {
		tok, lp = s.sample(logits)
		return tok, lp, true
	}
	k, logZ := s.scan(logits, mask)
	if k == 0 {
		return 0, 0, false
	}
	return s.pick(logits, k, logZ)
}

// next samples c's next token from logits, under its constraint when the
// request is steered. ok is false when the constraint leaves no token.
func (c *cand) next(logits []float32) (int, float64, bool) {
	if c.sr == nil {
		tok, lp := c.s.sample(logits)
		return tok, lp, true
	}
	t0 := time.Now()
	m := c.sr.mask(c.st, c.limit-len(c.tokens), c.sampled == 0)
	c.sr.maskTime += time.Since(t0)
	return c.s.sampleMasked(logits, m)
}

// steerAccept advances c's constraint state over the token just accepted
// (its piece up to a newline, or a stop token) and fails the candidate if
// the token broke it, which the mask prevents, or if the reply ended where
// it may not (its token budget ran out first). A candidate whose text is
// complete (steer.Program.Complete) ends there.
func (c *cand) steerAccept(piece []byte, stop bool) {
	p := c.sr.prog
	if stop {
		c.failed = c.failed || !p.CanEnd(c.st)
		return
	}
	st, ok, end := p.Feed(c.st, piece)
	c.st = st
	if !ok {
		c.failed = true
		return
	}
	if (end || c.done) && !p.CanEnd(st) {
		c.failed = true
	}
	// Nothing but spaces may follow, which the cleaning drops: more
	// tokens would cost decodes and change nothing shown.
	if !c.done && p.Complete(st) {
		c.done = true
	}
}

// decodeSeqs is how many sequences a request showing n candidates decodes
// in its first round: n, or for a steered request (sr not nil) n times
// Options.SteerSeqFactor, at most MaxCandidates; the best n are shown.
func (e *Engine) decodeSeqs(n int, sr *steerRun) int {
	if sr == nil || e.opts.SteerSeqFactor <= 1 {
		return n
	}
	return min(max(n, n*e.opts.SteerSeqFactor), e.opts.MaxCandidates)
}
