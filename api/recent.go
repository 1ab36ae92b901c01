package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/replyd/replyd/store"
)

// recentMax bounds the inferences recentInferences keeps.
const recentMax = 10000

// recentInferences remembers, in memory only, the inferences answered in
// the last store.FeedbackWindow: which key made them, their candidate texts
// and whether their log entry is written yet. Feedback needs it twice: a
// tablet may report right after the answer, before the entry (written once
// the answer is flushed) is on disk; and an edited suggestion's keystrokes
// saved need the suggestion's text, which the store keeps only for users
// with remember: true. A turn whose replies are streamed as they come
// (issue 42) is registered at its start (begin) with the way to stop its
// generation: a report on it while it runs (the user took a reply shown
// early) stops the rest at once (choose), then waits, as any report does,
// for the entry, which holds the replies sent. It holds at most recentMax inferences, oldest
// dropped first; after a restart it is empty, and an edit of an older
// inference of a user without remember counts 0 keystrokes saved.
type recentInferences struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*recentInference
	order []string // ring of ids, oldest at head
	head  int
}

type recentInference struct {
	keyHash    string
	at         time.Time
	candidates []string      // set before written is closed
	written    chan struct{} // closed once the log entry is written (or failed)
	// stop ends the turn's generation (nil once the answer is made);
	// guarded by recentInferences.mu.
	stop context.CancelCauseFunc
}

// errChosen is the cause a streamed turn's generation is stopped with when
// feedback on it arrives first: the user took a reply, the rest are not
// needed.
var errChosen = errors.New("a reply of the turn was chosen before the others were complete")

func newRecentInferences(max int) *recentInferences {
	return &recentInferences{max: max, byID: map[string]*recentInference{}}
}

// add records an inference about to be answered.
func (r *recentInferences) add(id, keyHash string, at time.Time, candidates []string) {
	r.begin(id, keyHash, at, nil)
	r.answered(id, candidates)
}

// begin records a turn whose generation runs: stop (when not nil) ends it.
// answered gives its candidates, markWritten says its entry is written.
func (r *recentInferences) begin(id, keyHash string, at time.Time, stop context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.order) < r.max {
		r.order = append(r.order, id)
	} else {
		delete(r.byID, r.order[r.head])
		r.order[r.head] = id
		r.head = (r.head + 1) % r.max
	}
	r.byID[id] = &recentInference{keyHash: keyHash, at: at, written: make(chan struct{}), stop: stop}
}

// answered sets the candidates a begun turn sent, once its generation is
// over (before markWritten).
func (r *recentInferences) answered(id string, candidates []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ri := r.byID[id]; ri != nil {
		ri.candidates, ri.stop = candidates, nil
	}
}

// choose stops the generation of turn id when it still runs and keyHash
// made it (errChosen).
func (r *recentInferences) choose(id, keyHash string) {
	r.mu.Lock()
	ri := r.byID[id]
	var stop context.CancelCauseFunc
	if ri != nil && ri.keyHash == keyHash {
		stop = ri.stop
	}
	r.mu.Unlock()
	if stop != nil {
		stop(errChosen)
	}
}

// written marks the inference's log entry as written (or as failed).
func (r *recentInferences) markWritten(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ri := r.byID[id]; ri != nil {
		select {
		case <-ri.written:
		default:
			close(ri.written)
		}
	}
}

// get returns the inference once its log entry is written, nil when it is
// not known here (or is older than the feedback window), or ctx's error.
func (r *recentInferences) get(ctx context.Context, id string, now time.Time) (*recentInference, error) {
	r.mu.Lock()
	ri := r.byID[id]
	r.mu.Unlock()
	if ri == nil || now.Sub(ri.at) > store.FeedbackWindow {
		return nil, nil
	}
	select {
	case <-ri.written:
		return ri, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
