// Package recall finds a remembering user's earlier replies that fit the
// partner's current turn: the pairs (partner's turn → what the user said)
// the store keeps for users who opted in with remember: true. It implements
// engine.Recaller.
//
// Similarity is lexical: Okapi BM25 over the words of the stored partner
// turns, queried with the words of the current one. Everyday conversation
// with one person repeats its topics in the same words ("tea", "physio",
// "your sister"), so word overlap weighted by rarity finds the exchanges
// that matter; it needs no second model (an embedding model would cost
// memory and tens of milliseconds a query on the appliance's CPU), works in
// any language that separates words, and its choices can be explained to a
// clinician. An inverted index answers in well under a millisecond for a
// user with 10,000 pairs (BenchmarkRecall10k).
//
// Each user's index is built from the store on first use and kept in
// memory (an LRU of users); the store's revision of the user's pairs, read
// on every query, tells when it must be rebuilt (a new pair, a prune, a
// deletion), so several replyd processes sharing a store stay correct. A
// rebuild of a large memory (syncRebuild pairs or more: tens of
// milliseconds at 10,000, BenchmarkBuild10k) runs in the background while
// queries go on with the previous index, so a reply's latency never pays
// for it; a smaller one, and a deletion, take effect at once.
package recall

import (
	"context"
	"sync"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Source is where the pairs come from; store/bolt's DB implements it.
type Source interface {
	// MemoryRev returns the revision of the user's pairs (0: no memory).
	MemoryRev(subject string) (uint64, error)
	// MemoryPairs returns the user's pairs, oldest first, and their revision.
	MemoryPairs(subject string) ([]store.Pair, uint64, error)
}

// DefaultUsers is how many users' indexes Memory keeps by default.
const DefaultUsers = 256

// Memory keeps an index per user and answers Recall. It is safe for
// concurrent use.
type Memory struct {
	src      Source
	maxUsers int

	mu    sync.Mutex
	users map[string]*cached
	clock uint64
}

type cached struct {
	mu       sync.Mutex // guards ix, rev and building
	ix       *Index
	rev      uint64
	building bool
	used     uint64     // guarded by Memory.mu
	buildMu  sync.Mutex // one build per user at a time
}

// syncRebuild is the size from which a changed memory is rebuilt in the
// background.
const syncRebuild = 1000

// New returns a Memory over src keeping at most maxUsers indexes (<= 0:
// DefaultUsers).
func New(src Source, maxUsers int) *Memory {
	if maxUsers <= 0 {
		maxUsers = DefaultUsers
	}
	return &Memory{src: src, maxUsers: maxUsers, users: map[string]*cached{}}
}

// Recall implements engine.Recaller: at most k of the user's pairs whose
// partner turns are most similar to partnerTurn.
func (m *Memory) Recall(ctx context.Context, user, partnerTurn string, k int) ([]engine.Example, error) {
	ix, err := m.index(user)
	if err != nil || ix == nil {
		return nil, err
	}
	var out []engine.Example
	for _, p := range ix.Search(partnerTurn, k) {
		out = append(out, engine.Example{Partner: p.Partner, Reply: p.Reply})
	}
	return out, nil
}

// index returns the user's current index, rebuilding it when the store's
// revision moved; nil when the user has no memory.
func (m *Memory) index(user string) (*Index, error) {
	rev, err := m.src.MemoryRev(user)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	c := m.users[user]
	if rev == 0 {
		delete(m.users, user)
		m.mu.Unlock()
		return nil, nil
	}
	m.clock++
	if c == nil {
		c = &cached{used: m.clock}
		m.users[user] = c
		m.evict()
	}
	c.used = m.clock
	m.mu.Unlock()

	c.mu.Lock()
	ix, stale := c.ix, c.rev != rev
	if ix != nil && (!stale || c.building) {
		c.mu.Unlock()
		return ix, nil
	}
	if ix != nil && ix.Len() >= syncRebuild {
		c.building = true
		c.mu.Unlock()
		go func() { _, _ = c.build(m.src, user) }()
		return ix, nil
	}
	c.mu.Unlock()
	return c.build(m.src, user)
}

// build reads the user's pairs and replaces the index.
func (c *cached) build(src Source, user string) (*Index, error) {
	c.buildMu.Lock()
	defer c.buildMu.Unlock()
	pairs, rev, err := src.MemoryPairs(user)
	var ix *Index
	if err == nil {
		ix = Build(pairs)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.building = false
	if err != nil {
		return c.ix, err
	}
	c.ix, c.rev = ix, rev
	return ix, nil
}

// evict drops the least recently used indexes beyond maxUsers; m.mu is held.
func (m *Memory) evict() {
	for len(m.users) > m.maxUsers {
		var oldest string
		var at uint64
		for u, c := range m.users {
			if oldest == "" || c.used < at {
				oldest, at = u, c.used
			}
		}
		delete(m.users, oldest)
	}
}
