package llm

import (
	"fmt"
	"slices"
	"strings"
)

// A reply the user picks comes back in the dialog's next request as the AAC
// user's turn. Tokenizing its text again need not give the tokens the model
// sampled for it: byte pieces, spaces and characters the reply's cleaning
// dropped tokenize differently (with random weights, 20 sampled tokens came
// back as about 100). The engine keeps, per dialog, the tokens it sampled
// for the replies it offered, and the prompt holds those tokens wherever a
// turn of the AAC user is exactly an offered reply: the model reads its own
// reply as it wrote it, and evaluating it costs no more than the reply did.
// A reply once taken up keeps its tokens for the rest of the dialog, so the
// prompt of every later turn renders it alike and the dialog's cached
// prompt stays a prefix of the next one.

// sampledReply is a reply's text as offered (cleanReply) with the tokens
// the model sampled for it.
type sampledReply struct {
	text   string
	tokens []int
}

// dialogReplies is what the engine keeps of one dialog's replies.
type dialogReplies struct {
	offered []sampledReply // the candidates of the dialog's last answer
	taken   []sampledReply // offered replies that came back as turns, oldest first
	used    uint64
}

// Bounds of the reply book: dialogs kept (least recently used out), and
// replies kept per dialog (oldest out; a turn that old has usually left
// the prompt).
const (
	maxReplyDialogs = 256
	maxTakenReplies = 128
	// maxOfferedReplies bounds one turn's offered replies, which steered
	// answers add to.
	maxOfferedReplies = 64
)

// replyBook holds dialogReplies by dialog ID. Only the owner goroutine uses
// it.
type replyBook struct {
	clock   uint64
	dialogs map[string]*dialogReplies
}

func newReplyBook() *replyBook { return &replyBook{dialogs: map[string]*dialogReplies{}} }

// offer records the candidates of dialog key's latest answer, replacing the
// previous answer's that were not taken.
func (b *replyBook) offer(key string, replies []sampledReply) {
	if key == "" {
		return
	}
	d := b.entry(key, len(replies) > 0)
	if d != nil {
		d.offered = replies
	}
}

// entry returns key's record, creating it (and evicting the least recently
// used beyond the bound) when create is set; nil if there is none.
func (b *replyBook) entry(key string, create bool) *dialogReplies {
	d := b.dialogs[key]
	if d == nil {
		if !create {
			return nil
		}
		d = &dialogReplies{}
		b.dialogs[key] = d
		for len(b.dialogs) > maxReplyDialogs {
			var victim string
			var oldest uint64
			for k, x := range b.dialogs {
				if x != d && (victim == "" || x.used < oldest) {
					victim, oldest = k, x.used
				}
			}
			delete(b.dialogs, victim)
		}
	}
	b.clock++
	d.used = b.clock
	return d
}

// sampled returns the tokens of the reply of dialog key whose text is
// exactly text (nil when none): a reply taken before, else one of the last
// answer's, which is taken from then on.
func (b *replyBook) sampled(key, text string) []int {
	d := b.entry(key, false)
	if d == nil || key == "" {
		return nil
	}
	for _, r := range d.taken {
		if r.text == text {
			return r.tokens
		}
	}
	for _, r := range d.offered {
		if r.text == text {
			d.taken = append(d.taken, r)
			if len(d.taken) > maxTakenReplies {
				d.taken = slices.Delete(d.taken, 0, len(d.taken)-maxTakenReplies)
			}
			return r.tokens
		}
	}
	return nil
}

// withSampled gives the AAC user's turns of dialog key that are replies the
// engine offered the tokens it sampled for them.
func (e *Engine) withSampled(key string, turns []turn) []turn {
	if key == "" {
		return turns
	}
	for i, t := range turns {
		if t.role == "assistant" {
			turns[i].tokens = e.replies.sampled(key, t.content)
		}
	}
	return turns
}

// replyMark stands for the k-th spliced reply in the rendered template. A
// unit separator is no part of any template and is left alone by them.
func replyMark(k int) string { return fmt.Sprintf("\x1freplyd-reply-%d\x1f", k) }

// splice renders msgs with the model's template, the messages that carry
// sampled tokens as those tokens, and tokenizes the rest. ok is false when
// the messages cannot be spliced (a message holds the marks, or the template
// did not keep them once each): then the caller tokenizes the plain text.
func (e *Engine) splice(msgs []chatMessage, addAssistant bool) (tokens []int, ok bool, err error) {
	marked := slices.Clone(msgs)
	var at []int
	for i, m := range msgs {
		if strings.Contains(m.Content, "\x1freplyd-reply-") {
			return nil, false, nil
		}
		if m.tokens != nil {
			marked[i].Content = replyMark(len(at))
			at = append(at, i)
		}
	}
	text, err := applyTemplate(e.tmpl, marked, addAssistant)
	if err != nil {
		return nil, false, err
	}
	for k, i := range at {
		before, after, found := strings.Cut(text, replyMark(k))
		if !found || strings.Contains(after, replyMark(k)) {
			return nil, false, nil
		}
		part, err := e.model.Tokenize(before, k == 0, true)
		if err != nil {
			return nil, false, err
		}
		tokens = append(tokens, part...)
		tokens = append(tokens, msgs[i].tokens...)
		text = after
	}
	part, err := e.model.Tokenize(text, false, true)
	if err != nil {
		return nil, false, err
	}
	return append(tokens, part...), true, nil
}

// offerReplies records the candidates of dialog key's answer whose tokens
// are exactly their text. A steered answer's are added to the turn's
// offered replies (the user may still pick one shown before it); any
// other answer's replace them.
func (e *Engine) offerReplies(key string, out []scored, steered bool) {
	if key == "" {
		return
	}
	var rs []sampledReply
	for _, c := range out {
		if c.whole && c.text != "" && len(c.sampled) > 0 {
			rs = append(rs, sampledReply{text: c.text, tokens: slices.Clone(c.sampled)})
		}
	}
	if steered {
		if d := e.replies.entry(key, false); d != nil {
			rs = append(slices.Clone(d.offered), rs...)
			rs = rs[max(0, len(rs)-maxOfferedReplies):]
		}
	}
	e.replies.offer(key, rs)
}

// The cells of the replies themselves are kept too: after an answer in a
// dialog its candidates' sequences stay in the pool (parked) until the
// engine's next job. When that job continues the same dialog and its prompt
// goes on with one of them, as it does when the user took that reply, the
// reply's cells join the prompt sequence instead of being evaluated again;
// the others are freed. Any other job frees them all first.

// parkedReplies are the candidate sequences of dialog key's last answer,
// after a prompt of promptLen tokens.
type parkedReplies struct {
	key       string
	promptLen int
	cands     []parkedReply
}

// parkedReply is one candidate sequence and the tokens its cells hold
// after the prompt.
type parkedReply struct {
	seq    int
	tokens []int
}

// park keeps the candidate sequences of dialog key's answer for its next
// turn; without a key it frees them.
func (e *Engine) park(key string, promptLen int, cands []*cand) {
	p := &parkedReplies{key: key, promptLen: promptLen}
	for _, c := range cands {
		// The cells hold the tokens decoded after the prompt: all that
		// were sampled but the last when the token cap ended the reply.
		if n := e.genLen[c.seq-1] - promptLen; n > 0 && key != "" {
			p.cands = append(p.cands, parkedReply{seq: c.seq, tokens: slices.Clone(c.tokens[:n])})
		}
	}
	if len(p.cands) == 0 || e.cur.key != key || len(e.cur.tokens) != promptLen {
		e.freeGen()
		return
	}
	e.parked = p
}

// adoptParked ends the parking: when the prompt sequence holds dialog key's
// last prompt and tokens go on with a parked reply, that reply's cells join
// the prompt sequence, as far as tokens agree with them. Every candidate
// sequence is empty afterwards.
func (e *Engine) adoptParked(key string, tokens []int) {
	p := e.parked
	if p == nil {
		return
	}
	e.parked = nil
	defer e.freeGen()
	if key == "" || key != p.key || key != e.cur.key || len(e.cur.tokens) != p.promptLen ||
		commonPrefix(e.cur.tokens, tokens) < p.promptLen {
		return
	}
	best, bestN := -1, 0
	for i, c := range p.cands {
		if n := commonPrefix(c.tokens, tokens[p.promptLen:]); n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return
	}
	c := p.cands[best]
	// One stream (the unified pool): the copy only tags cells, and only
	// the reply's own, which the prompt sequence does not hold yet.
	e.lctx.KvCacheSeqCp(c.seq, promptSeq, p.promptLen, -1)
	if bestN < len(c.tokens) {
		e.lctx.KvCacheSeqRm(promptSeq, p.promptLen+bestN, -1)
	}
	e.cur.tokens = append(e.cur.tokens, c.tokens[:bestN]...)
	e.cur.saved = false
}
