package steer

import (
	"strings"
	"unicode/utf8"

	"github.com/replyd/replyd/engine"
)

// segKind is what one part of a Program matches.
type segKind uint8

const (
	segLit  segKind = iota // exactly lit (spaces match any run of whitespace)
	segWord                // one word meeting entry/whole/not
	segFree                // any text, at least one printable character (pos 1 once written)
	segEnd                 // nothing but punctuation and spaces
)

type seg struct {
	kind  segKind
	lit   []rune
	entry []rune // folded beginning the word must have
	whole bool   // the word is exactly entry
	not   []rune // folded word it must differ from; nil for none
	cap   int    // runes of a word worth counting: beyond, all are alike
	exact bool   // segEnd: nothing more but spaces (a replace's rest is unchanged)
}

// Program is a compiled constraint. It is immutable and safe for
// concurrent use.
type Program struct {
	segs []seg
	// tail[i] is the fewest bytes that complete segments i.. when segment
	// i begins (see Need).
	tail []int
	// forced is the literal text the reply must begin with (a prefix, or a
	// replace text's words before the replaced one); "" for none.
	forced string
	words  int
}

// State is where a reply written so far stands in a Program. The zero
// State is the start. States are comparable: equal States allow the same
// continuations.
type State struct {
	seg  uint8
	pos  uint8 // segLit: runes matched; segWord: word runes counted (capped)
	flag uint8
	join rune // a joiner after a word rune, not yet known to be inner
	pend [3]byte
	np   uint8 // bytes in pend: an incomplete UTF-8 sequence
}

const (
	fContent uint8 = 1 << iota // a printable non-space character was written
	fSpace                     // the last character written was a space
	fInWord                    // inside a word of a segWord
	fDiv                       // the word differs from seg.not so far
)

// Compile compiles a valid constraint (see Validate).
func Compile(s engine.Steer) (*Program, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	p := &Program{}
	switch s.Mode {
	case engine.SteerWords:
		for _, w := range s.Words {
			body := strings.TrimSuffix(w, " ")
			p.addWord(foldString(body), body != w, nil)
		}
		p.segs = append(p.segs, seg{kind: segEnd})
		p.words = len(s.Words)
	case engine.SteerPrefix:
		p.forced = cleanPrefix(s.Prefix)
		p.segs = append(p.segs, seg{kind: segLit, lit: []rune(p.forced)}, seg{kind: segFree})
		p.words = len(Words(p.forced))
	case engine.SteerReplace:
		orig := Clean(s.Text)
		ws := Words(orig)
		w := ws[s.Word]
		initial := s.Initial
		if initial == "" {
			initial = w.Text
		}
		p.forced = orig[:w.Start]
		if p.forced != "" {
			p.segs = append(p.segs, seg{kind: segLit, lit: []rune(p.forced)})
		}
		first, _ := utf8.DecodeRuneInString(initial)
		p.addWord([]rune{fold(first)}, false, foldString(w.Text))
		if after := orig[w.End:]; after != "" {
			p.segs = append(p.segs, seg{kind: segLit, lit: []rune(after)})
		}
		p.segs = append(p.segs, seg{kind: segEnd, exact: true})
		p.words = len(ws)
	}
	p.tail = make([]int, len(p.segs)+1)
	for i := len(p.segs) - 1; i >= 0; i-- {
		s := &p.segs[i]
		switch s.kind {
		case segLit:
			p.tail[i] = len(string(s.lit)) + p.tail[i+1]
		case segFree:
			p.tail[i] = 1
		case segWord:
			p.tail[i] = p.sepBefore(i) + p.wordMin(i) + p.tail[i+1]
		}
	}
	return p, nil
}

// sepBefore is 1 when segment i is a word that follows another word.
func (p *Program) sepBefore(i int) int {
	if i > 0 && p.segs[i-1].kind == segWord {
		return 1
	}
	return 0
}

// entryRest is the fewest bytes that finish the entry of s after k of its
// runes: the rest, and a word rune after a final joiner.
func entryRest(s *seg, k int) int {
	if k >= len(s.entry) {
		return 0
	}
	n := len(string(s.entry[k:]))
	if IsJoiner(s.entry[len(s.entry)-1]) {
		n++
	}
	return n
}

// wordMin is the fewest bytes of the word of segment i.
func (p *Program) wordMin(i int) int {
	s := &p.segs[i]
	n := max(1, entryRest(s, 0))
	if !s.whole && s.not != nil && string(s.entry) == string(s.not) {
		n++
	}
	return n
}

// Need is about the fewest bytes that, written after st, let the reply end
// (0 when CanEnd). It never grows by more than two over one character, and
// some single character always makes it smaller: the sampler uses it to
// finish a reply within its token budget.
func (p *Program) Need(st State) int {
	if int(st.seg) >= len(p.segs) {
		return 0
	}
	extra := int(st.np)
	i := int(st.seg)
	s := &p.segs[i]
	switch s.kind {
	case segEnd:
		return extra
	case segFree:
		if st.pos != 0 {
			return extra
		}
		return 1 + extra
	case segLit:
		return len(string(s.lit[st.pos:])) + p.tail[i+1] + extra
	}
	if st.flag&fInWord == 0 {
		return p.wordMin(i) + p.tail[i+1] + extra
	}
	k := int(st.pos)
	if st.join != 0 && k < len(s.entry) {
		// The joiner can only be inner: it is the entry's next rune and
		// a word rune must follow.
		k++
		if k == len(s.entry) {
			extra++
		}
	}
	rem := entryRest(s, k)
	if st.flag&fDiv == 0 && max(k, len(s.entry)) == len(s.not) {
		rem++
	}
	return rem + p.tail[i+1] + extra
}

func (p *Program) addWord(entry []rune, whole bool, not []rune) {
	p.segs = append(p.segs, seg{kind: segWord, entry: entry, whole: whole, not: not, cap: max(len(entry), len(not)) + 1})
}

// Forced is the text every reply begins with exactly ("" for none): the
// engine may put it into the prompt instead of sampling it (see Heal).
func (p *Program) Forced() string { return p.forced }

// Words is the number of words the constraint speaks of (for the reply's
// token budget).
func (p *Program) Words() int { return p.words }

// Heal splits the forced text for token healing: keep is what goes into
// the prompt, the forced text up to the end of its last word but one; the
// rest (a space and the last word, maybe unfinished) is sampled, so that
// the model writes the last word with its own tokens.
func (p *Program) Heal() (keep string) {
	s := strings.TrimRightFunc(p.forced, isSpace)
	s = strings.TrimRightFunc(s, func(r rune) bool { return !isSpace(r) })
	return strings.TrimRightFunc(s, isSpace)
}

// Feed writes b from st. It returns the new state, whether b may be
// written there, and end when b holds a newline: the reply ends there (the
// rest of b is not written), which ok allows only where the reply may end.
func (p *Program) Feed(st State, b []byte) (next State, ok, end bool) {
	for _, c := range b {
		if c == '\n' {
			return st, p.CanEnd(st), true
		}
		if st, ok = p.Step(st, c); !ok {
			return st, false, false
		}
	}
	return st, true, false
}

// Step writes one byte. ok is false when no reply beginning with what was
// written and c meets the constraint. A newline is not a byte to Step: it
// ends the reply (see Feed and CanEnd).
func (p *Program) Step(st State, c byte) (State, bool) {
	if p.Unconstrained(st) {
		return st, true // whatever the cleaning keeps of it
	}
	if st.np == 0 && c < utf8.RuneSelf {
		return p.stepRune(st, rune(c))
	}
	var buf [4]byte
	copy(buf[:], st.pend[:st.np])
	buf[st.np] = c
	n := int(st.np) + 1
	if !utf8.FullRune(buf[:n]) {
		if n == 1 && !utf8.RuneStart(c) || n == 4 {
			return st, false
		}
		copy(st.pend[:], buf[:3])
		st.np = uint8(n)
		return st, true
	}
	r, size := utf8.DecodeRune(buf[:n])
	if r == utf8.RuneError || size != n {
		return st, false
	}
	st.np, st.pend = 0, [3]byte{}
	return p.stepRune(st, r)
}

// stepRune writes one character.
func (p *Program) stepRune(st State, r rune) (State, bool) {
	sp := isSpace(r)
	if !sp && !isPrint(r) {
		return st, false // the cleaning would drop it
	}
	if sp {
		if st.flag&fContent == 0 || st.flag&fSpace != 0 {
			return st, true // leading spaces and runs collapse
		}
		r = ' '
	}
	st, ok := p.put(st, r)
	if !ok {
		return st, false
	}
	if sp {
		st.flag |= fSpace
	} else {
		st.flag = st.flag&^fSpace | fContent
	}
	return st, true
}

// put dispatches one (cleaned) character to the current segment.
func (p *Program) put(st State, r rune) (State, bool) {
	if int(st.seg) >= len(p.segs) {
		return st, false
	}
	s := &p.segs[st.seg]
	switch s.kind {
	case segLit:
		if int(st.pos) >= len(s.lit) || s.lit[st.pos] != r {
			return st, false
		}
		st.pos++
		if int(st.pos) == len(s.lit) {
			st.seg++
			st.pos = 0
		}
		return st, true
	case segFree:
		if r != ' ' {
			st.pos = 1 // the continuation has begun
		}
		return st, true
	case segEnd:
		if IsWordRune(r) || s.exact && r != ' ' {
			return st, false
		}
		return st, true
	}
	// segWord
	switch {
	case IsWordRune(r):
		if st.flag&fInWord == 0 {
			st.flag |= fInWord
			st.pos = 0
			st.flag &^= fDiv
			if s.not == nil {
				st.flag |= fDiv
			}
		}
		if st.join != 0 {
			j := st.join
			st.join = 0
			var ok bool
			if st, ok = p.wordRune(st, s, j); !ok {
				return st, false
			}
		}
		return p.wordRune(st, s, r)
	case IsJoiner(r) && st.flag&fInWord != 0 && st.join == 0:
		// Inner if a word rune follows, else the end of the word: one of
		// the two must be possible.
		if _, ok := p.wordRune(st, s, r); ok {
			st.join = r
			return st, true
		}
		if _, ok := p.endWord(st); ok {
			st.join = r
			return st, true
		}
		return st, false
	}
	// A separator: it ends the word being written, if any.
	if st.flag&fInWord != 0 {
		var ok bool
		if st, ok = p.endWord(st); !ok {
			return st, false
		}
		return p.put(st, r)
	}
	if p.sepBefore(int(st.seg)) == 0 {
		// Nothing but the word itself at the reply's start or right
		// after a literal.
		return st, false
	}
	return st, true
}

// wordRune adds one character (a word rune or an inner joiner) to the word.
func (p *Program) wordRune(st State, s *seg, r rune) (State, bool) {
	f := fold(r)
	k := int(st.pos)
	if k < len(s.entry) && !fits(s.entry[k], f) {
		return st, false
	}
	if s.whole && k >= len(s.entry) {
		return st, false
	}
	if st.flag&fDiv == 0 && (k >= len(s.not) || s.not[k] != f) {
		st.flag |= fDiv
	}
	if k < s.cap {
		st.pos++
	}
	return st, true
}

// endWord finishes the word being written and moves to the next segment,
// giving it a pending joiner (which was not inner after all).
func (p *Program) endWord(st State) (State, bool) {
	s := &p.segs[st.seg]
	k := int(st.pos)
	if k < len(s.entry) {
		return st, false
	}
	if st.flag&fDiv == 0 && k == len(s.not) {
		return st, false // the very word it must differ from
	}
	st.flag &^= fInWord | fDiv
	st.seg++
	st.pos = 0
	if j := st.join; j != 0 {
		st.join = 0
		return p.put(st, j)
	}
	return st, true
}

// CanEnd reports whether the reply may end in st (an end-of-turn token or
// a newline next).
func (p *Program) CanEnd(st State) bool {
	if st.np != 0 {
		return false
	}
	if int(st.seg) < len(p.segs) && p.segs[st.seg].kind == segFree {
		return st.pos != 0
	}
	if st.flag&fInWord != 0 {
		var ok bool
		if st, ok = p.endWord(st); !ok {
			return false
		}
	}
	return int(st.seg) < len(p.segs) && p.segs[st.seg].kind == segEnd
}

// Complete reports whether the reply may end in st and nothing but spaces
// may follow (a replace's text written to its end): whatever the reply
// goes on with, its cleaned text stays the same, so the sampler ends it.
func (p *Program) Complete(st State) bool {
	if st.np != 0 || st.join != 0 || st.flag&fInWord != 0 || int(st.seg) >= len(p.segs) {
		return false
	}
	s := &p.segs[st.seg]
	return s.kind == segEnd && s.exact
}

// Unconstrained reports whether every continuation from st meets the
// constraint as long as the reply does not end before CanEnd: the sampler
// needs no mask there (a prefix's free continuation).
func (p *Program) Unconstrained(st State) bool {
	return st.np == 0 && int(st.seg) < len(p.segs) && p.segs[st.seg].kind == segFree && st.pos != 0
}

// InFreeWord reports whether, from st, any run of word runes may be
// written (the current word has met its entry and may go on): the sampler
// then allows every token made only of word runes without checking it.
func (p *Program) InFreeWord(st State) bool {
	if st.np != 0 || st.join != 0 || int(st.seg) >= len(p.segs) {
		return false
	}
	s := &p.segs[st.seg]
	switch s.kind {
	case segFree:
		return true
	case segWord:
		return st.flag&fInWord != 0 && !s.whole && int(st.pos) >= len(s.entry)
	}
	return false
}

// FreeWordNeed is Need after any run of word runes written from st, where
// InFreeWord(st): ok is false when it depends on the runes (a replace's
// word still equal to the start of the word it must differ from). The
// sampler then decides every word-only token at once.
func (p *Program) FreeWordNeed(st State) (need int, ok bool) {
	if !p.InFreeWord(st) {
		return 0, false
	}
	i := int(st.seg)
	s := &p.segs[i]
	if s.kind == segFree {
		return 0, true
	}
	if s.not != nil && st.flag&fDiv == 0 {
		return 0, false
	}
	return p.tail[i+1], true
}

// Accepts reports whether the whole text (before cleaning) meets the
// constraint, written from the start.
func (p *Program) Accepts(text string) bool {
	st, ok, end := p.Feed(State{}, []byte(text))
	if end {
		return ok
	}
	return ok && p.CanEnd(st)
}

// Partial reports whether st ends inside a character (an incomplete UTF-8
// sequence).
func (st State) Partial() bool { return st.np != 0 }
