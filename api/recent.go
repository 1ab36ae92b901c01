package api

import (
	"context"
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
// with remember: true. It holds at most recentMax inferences, oldest
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
	candidates []string
	written    chan struct{} // closed once the log entry is written (or failed)
}

func newRecentInferences(max int) *recentInferences {
	return &recentInferences{max: max, byID: map[string]*recentInference{}}
}

// add records an inference about to be answered.
func (r *recentInferences) add(id, keyHash string, at time.Time, candidates []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.order) < r.max {
		r.order = append(r.order, id)
	} else {
		delete(r.byID, r.order[r.head])
		r.order[r.head] = id
		r.head = (r.head + 1) % r.max
	}
	r.byID[id] = &recentInference{keyHash: keyHash, at: at, candidates: candidates, written: make(chan struct{})}
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
