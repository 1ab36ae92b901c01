package engine

// SteerMode names how a steered request constrains its candidates.
type SteerMode string

// The steering modes of a request's Steer.
const (
	// SteerWords: one entry per word of the reply, each the beginning of
	// its word (an initial, a spelled start, a whole word ending in a
	// space, or "" for any word).
	SteerWords SteerMode = "words"
	// SteerPrefix: every reply begins with the text typed so far.
	SteerPrefix SteerMode = "prefix"
	// SteerReplace: a given reply with one of its words replaced by a
	// different word.
	SteerReplace SteerMode = "replace"
)

// Steer is a constraint every candidate of a steered request meets: the
// language model enforces it while sampling (engine/steer defines the words
// and the matching). Exactly the fields of its Mode are set.
type Steer struct {
	Mode SteerMode
	// Words (SteerWords) holds one entry per word of the reply, in order.
	Words []string
	// Prefix (SteerPrefix) is the reply typed so far, possibly mid-word.
	Prefix string
	// Text, Word and Initial (SteerReplace): the candidates are Text with
	// its Word-th word (0-based) replaced by a different word beginning
	// with Initial, or with the replaced word's own initial when Initial
	// is empty.
	Text    string
	Word    int
	Initial string
}
