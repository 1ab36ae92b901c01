package api

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// memStore is an in-memory Store with the contract documented in deps.go and
// store/records.go. It is what the scenario tests run against.
type memStore struct {
	store.MemoryLimiter
	mu        sync.Mutex
	keys      map[string]store.APIKey
	keyOrder  []string
	adminHash string
	prompts   []store.PromptVersion
	otps      map[string]memOTP // scope -> code
	totpUsed  bool
	totpStep  int64
	otpGuard  store.OTPGuard
	writeFail error // reported by Ping, as a failed write
	sessions  map[string]time.Time
	pairings  map[string]store.Pairing
	logs      []store.LogEntry
	outcomes  map[string]store.Outcome // inference id -> outcome
	texts     map[string]*store.RememberedTexts
	pairs     map[string][]store.Pair // subject -> pairs
	revs      map[string]uint64       // subject -> memory revision (a user has a memory when present)
	backup    []byte
	secrets   map[string][]byte
	failWith  error // returned by every method when set
	// scrubProblem is DeleteUser's ScrubProblem (a PostgreSQL VACUUM or
	// CHECKPOINT refused).
	scrubProblem string
}

type memOTP struct {
	hash            string
	issued, expires time.Time
}

func newMemStore() *memStore {
	return &memStore{keys: map[string]store.APIKey{}, sessions: map[string]time.Time{},
		outcomes: map[string]store.Outcome{}, texts: map[string]*store.RememberedTexts{},
		pairs: map[string][]store.Pair{}, revs: map[string]uint64{}, pairings: map[string]store.Pairing{}}
}

func (m *memStore) CreatePairing(p store.Pairing, maxPending int, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return m.failWith
	}
	pending := 0
	for h, q := range m.pairings {
		if !now.Before(q.ExpiresAt) {
			delete(m.pairings, h)
		} else if q.UsedAt.IsZero() {
			pending++
		}
	}
	if _, ok := m.pairings[p.CodeHash]; ok {
		return store.ErrExists
	}
	if maxPending > 0 && pending >= maxPending {
		return store.ErrLimit
	}
	m.pairings[p.CodeHash] = p
	return nil
}

func (m *memStore) PrunePairings(now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for h, p := range m.pairings {
		if !now.Before(p.ExpiresAt) {
			delete(m.pairings, h)
			n++
		}
	}
	return n, nil
}

func (m *memStore) RedeemPairing(codeHash, keyHash string, now time.Time) (store.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return store.APIKey{}, m.failWith
	}
	p, ok := m.pairings[codeHash]
	switch {
	case !ok:
		return store.APIKey{}, store.ErrNotFound
	case !now.Before(p.ExpiresAt):
		delete(m.pairings, codeHash)
		return store.APIKey{}, store.ErrExpired
	case !p.UsedAt.IsZero():
		return store.APIKey{}, store.ErrUsed
	}
	k := p.Key
	k.Hash, k.CreatedAt = keyHash, now
	if k.Status == store.StatusRevoked {
		k.RevokedAt = now
	}
	m.keys[k.Hash] = k
	m.keyOrder = append(m.keyOrder, k.Hash)
	p.UsedAt, p.KeyHash = now, keyHash
	m.pairings[codeHash] = p
	return k, nil
}

func (m *memStore) CreateKey(k store.APIKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return m.failWith
	}
	if _, ok := m.keys[k.Hash]; ok {
		return store.ErrExists
	}
	k.Scopes = slices.Clone(k.Scopes)
	m.keys[k.Hash] = k
	m.keyOrder = append(m.keyOrder, k.Hash)
	return nil
}

func (m *memStore) GetKey(hash string) (store.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return store.APIKey{}, m.failWith
	}
	k, ok := m.keys[hash]
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	return k, nil
}

func (m *memStore) ListKeys(limit int, includeRevoked bool) ([]store.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.APIKey
	for i := len(m.keyOrder) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
		k := m.keys[m.keyOrder[i]]
		if k.Status == store.StatusRevoked && !includeRevoked {
			continue
		}
		out = append(out, k)
	}
	return out, nil
}

func (m *memStore) RevokeKey(hash string, at time.Time) (store.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[hash]
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	if k.Status != store.StatusRevoked {
		k.Status, k.RevokedAt = store.StatusRevoked, at
		m.keys[hash] = k
	}
	return k, nil
}

func (m *memStore) TouchKey(hash string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[hash]
	if !ok {
		return store.ErrNotFound
	}
	k.LastUsedAt = at
	m.keys[hash] = k
	return nil
}

func (m *memStore) AdminKeyHash() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.adminHash, nil
}

func (m *memStore) SetAdminKeyHash(hash string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adminHash = hash
	return nil
}

func (m *memStore) SetAdminKeyHashIfAbsent(hash string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adminHash != "" {
		return false, nil
	}
	m.adminHash = hash
	return true, nil
}

func (m *memStore) CurrentPrompt() (store.PromptVersion, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return store.PromptVersion{}, false, m.failWith
	}
	if len(m.prompts) == 0 {
		return store.PromptVersion{}, false, nil
	}
	return m.prompts[len(m.prompts)-1], true, nil
}

func (m *memStore) SavePrompt(p store.PromptVersion) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range m.prompts {
		if q.Version == p.Version {
			return store.ErrExists
		}
	}
	m.prompts = append(m.prompts, p)
	return nil
}

func (m *memStore) PromptHistory(limit int) ([]store.PromptVersion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.PromptVersion
	for i := len(m.prompts) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, m.prompts[i])
	}
	return out, nil
}

func (m *memStore) NextPromptVersion() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	max := 0
	for _, p := range m.prompts {
		if n, err := strconv.Atoi(p.Version); err == nil && n > max {
			max = n
		}
	}
	return strconv.Itoa(max + 1), nil
}

func (m *memStore) SaveOTP(scope, codeHash string, issuedAt, expiresAt time.Time, resend time.Duration) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return 0, m.failWith
	}
	if m.otps == nil {
		m.otps = map[string]memOTP{}
	}
	if o, ok := m.otps[scope]; ok && !issuedAt.Before(o.issued) && issuedAt.Sub(o.issued) < resend {
		return o.issued.Add(resend).Sub(issuedAt), nil
	}
	m.otps[scope] = memOTP{hash: codeHash, issued: issuedAt, expires: expiresAt}
	return 0, nil
}

func (m *memStore) UseOTP(scope, codeHash string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.otps[scope]
	if !ok || !now.Before(o.expires) || o.hash != codeHash {
		return false, nil
	}
	delete(m.otps, scope)
	return true, nil
}

func (m *memStore) DeleteOTP(scope string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.otps, scope)
	return nil
}

func (m *memStore) OTPLock(now time.Time) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.otpGuard.LockedUntil) {
		return m.otpGuard.LockedUntil, nil
	}
	return time.Time{}, nil
}

func (m *memStore) OTPFailed(now time.Time, rule store.OTPLockRule) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, started := rule.Next(m.otpGuard, now)
	m.otpGuard = g
	if started {
		return g.LockedUntil, nil
	}
	return time.Time{}, nil
}

func (m *memStore) UseTOTPStep(step int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.totpUsed && step <= m.totpStep {
		return false, nil
	}
	m.totpUsed, m.totpStep = true, step
	return true, nil
}

func (m *memStore) PruneOTPs(now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, o := range m.otps {
		if !now.Before(o.expires) {
			delete(m.otps, k)
			n++
		}
	}
	return n, nil
}

func (m *memStore) CreateSession(tokenHash string, expiresAt time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessions[tokenHash] = expiresAt
	return nil
}

func (m *memStore) SessionValid(tokenHash string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.sessions[tokenHash]
	return ok && now.Before(exp), nil
}

func (m *memStore) DeleteSession(tokenHash string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, tokenHash)
	return nil
}

func (m *memStore) AppendLog(e store.LogEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Inference != nil && e.Inference.Remember != nil && e.Subject != "" {
		m.texts[e.Inference.ID] = e.Inference.Remember
		if _, ok := m.revs[e.Subject]; !ok {
			m.revs[e.Subject] = 1
		}
	}
	if e.Inference != nil {
		inf := *e.Inference
		inf.Remember = nil // as the store: no text in the log
		e.Inference = &inf
	}
	m.logs = append(m.logs, e)
	return nil
}

// entryLocked finds the log entry of an inference id.
func (m *memStore) entryLocked(id string) (store.LogEntry, bool) {
	for _, e := range m.logs {
		if e.Inference != nil && e.Inference.ID == id {
			return e, true
		}
	}
	return store.LogEntry{}, false
}

func (m *memStore) Inference(id string) (store.Inference, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return store.Inference{}, m.failWith
	}
	e, ok := m.entryLocked(id)
	if !ok {
		return store.Inference{}, store.ErrNotFound
	}
	inf := store.Inference{ID: id, At: e.Timestamp, KeyHash: e.ResourceID, Subject: e.Subject,
		PromptVersion: e.Inference.PromptVersion, CandidateChars: e.Inference.CandidateChars}
	if t, ok := m.texts[id]; ok {
		inf.Remembered, inf.Texts = true, t
	}
	if o, ok := m.outcomes[id]; ok {
		inf.Outcome = &o
	}
	return inf, nil
}

func (m *memStore) SetOutcome(id string, o store.Outcome, reply string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entryLocked(id)
	if !ok {
		return 0, store.ErrNotFound
	}
	m.outcomes[id] = o
	t, ok := m.texts[id]
	if !ok {
		return 0, nil
	}
	var kept []store.Pair
	for _, p := range m.pairs[e.Subject] {
		if p.InferenceID != id {
			kept = append(kept, p)
		}
	}
	if reply != "" {
		kept = append(kept, store.Pair{InferenceID: id, At: e.Timestamp, Partner: t.Partner, Reply: reply})
	}
	m.pairs[e.Subject] = kept
	m.revs[e.Subject]++
	return m.revs[e.Subject], nil
}

func (m *memStore) Outcomes(since, until time.Time, fn func(store.OutcomeRecord) error) error {
	m.mu.Lock()
	var recs []store.OutcomeRecord
	for _, e := range m.logs {
		if e.Inference == nil || e.Timestamp.Before(since) || !e.Timestamp.Before(until) {
			continue
		}
		o, ok := m.outcomes[e.Inference.ID]
		if !ok {
			continue
		}
		r := store.OutcomeRecord{Inference: store.Inference{ID: e.Inference.ID, At: e.Timestamp, KeyHash: e.ResourceID,
			Subject: e.Subject, PromptVersion: e.Inference.PromptVersion, CandidateChars: e.Inference.CandidateChars, Outcome: &o}}
		for _, p := range m.pairs[e.Subject] {
			if p.InferenceID == e.Inference.ID {
				r.Pair = &p
			}
		}
		recs = append(recs, r)
	}
	m.mu.Unlock()
	for _, r := range recs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) MemoryUsers() ([]store.MemoryUser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.MemoryUser
	for subj, rev := range m.revs {
		out = append(out, store.MemoryUser{Subject: subj, Pairs: len(m.pairs[subj]), CreatedAt: t0, Rev: rev})
	}
	slices.SortFunc(out, func(a, b store.MemoryUser) int { return strings.Compare(a.Subject, b.Subject) })
	return out, nil
}

func (m *memStore) MemoryRev(subject string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revs[subject], nil
}

func (m *memStore) PruneMemory(pairsBefore, textsBefore time.Time) (store.MemoryPrune, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var p store.MemoryPrune
	for subj, pairs := range m.pairs {
		var kept []store.Pair
		for _, pr := range pairs {
			if !pairsBefore.IsZero() && pr.At.Before(pairsBefore) {
				p.Pairs++
				continue
			}
			kept = append(kept, pr)
		}
		m.pairs[subj] = kept
	}
	for _, e := range m.logs {
		if e.Inference != nil && m.texts[e.Inference.ID] != nil && e.Timestamp.Before(textsBefore) {
			delete(m.texts, e.Inference.ID)
			p.Pending++
		}
	}
	return p, nil
}

func (m *memStore) MemoryPairs(subject string) ([]store.Pair, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev, ok := m.revs[subject]
	if !ok {
		return []store.Pair{}, 0, nil
	}
	return slices.Clone(m.pairs[subject]), rev, nil
}

func (m *memStore) DeleteUser(subject string) (store.UserDeletion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d store.UserDeletion
	_, d.Key = m.revs[subject]
	d.Pairs = len(m.pairs[subject])
	delete(m.revs, subject)
	delete(m.pairs, subject)
	for _, e := range m.logs {
		if e.Subject != subject || e.Inference == nil {
			continue
		}
		if _, ok := m.outcomes[e.Inference.ID]; ok {
			d.Outcomes++
			delete(m.outcomes, e.Inference.ID)
		}
		if _, ok := m.texts[e.Inference.ID]; ok {
			d.Pending++
			delete(m.texts, e.Inference.ID)
		}
	}
	if !d.Key && d.Outcomes == 0 {
		return d, store.ErrNotFound
	}
	d.ScrubProblem = m.scrubProblem
	return d, nil
}

func (m *memStore) Logs(q store.LogQuery) ([]store.LogEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.LogEntry
	for i := len(m.logs) - 1; i >= 0 && (q.Limit <= 0 || len(out) < q.Limit); i-- {
		e := m.logs[i]
		if e.Timestamp.Before(q.Since) || (q.Level != "" && e.Level != q.Level) || (q.Stream != "" && e.StreamName != q.Stream) {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// statsLocked counts infer entries with since <= Timestamp < until, like the
// bbolt store, through the store's StatsBuilder.
func (m *memStore) statsLocked(since, until time.Time) store.Stats {
	b := store.NewStatsBuilder()
	for _, e := range m.logs {
		if e.StreamName != store.StreamInfer || e.Timestamp.Before(since) || !e.Timestamp.Before(until) {
			continue
		}
		r := store.StatsRow{Subject: e.Subject, KeyHash: e.ResourceID, Status: e.Status, ErrorCode: e.ErrorCode, LatencyMS: e.LatencyMS}
		if e.Inference != nil {
			r.Answered, r.PromptVersion = true, e.Inference.PromptVersion
			if o, ok := m.outcomes[e.Inference.ID]; ok {
				r.Outcome = &o
			}
		}
		b.Add(r)
	}
	return b.Stats()
}

func (m *memStore) Stats(since, until time.Time) (store.Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked(since, until), nil
}

func (m *memStore) StatsSeries(since, until time.Time, bucket time.Duration) ([]store.StatsBucket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.StatsBucket
	for t := since; t.Before(until); t = t.Add(bucket) {
		end := t.Add(bucket)
		if end.After(until) {
			end = until
		}
		st := m.statsLocked(t, end)
		out = append(out, store.StatsBucket{Start: t, TotalRequests: st.TotalRequests, ActiveUsers: st.ActiveUsers, Outcomes: st.Outcomes, Accepted: st.Accepted})
	}
	return out, nil
}

func (m *memStore) Backup(w io.Writer) (int64, error) {
	m.mu.Lock()
	data := m.backup
	m.mu.Unlock()
	if data == nil {
		return 0, errors.New("backup failed")
	}
	n, err := w.Write(data)
	return int64(n), err
}

func (m *memStore) InstallationSecret(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failWith != nil {
		return nil, m.failWith
	}
	if m.secrets == nil {
		m.secrets = map[string][]byte{}
	}
	if _, ok := m.secrets[name]; !ok {
		m.secrets[name] = []byte("test secret " + name)
	}
	return slices.Clone(m.secrets[name]), nil
}

func (m *memStore) Secret(name string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.secrets[name]
	return slices.Clone(v), ok, m.failWith
}

func (m *memStore) SetSecret(name string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.secrets == nil {
		m.secrets = map[string][]byte{}
	}
	if len(value) == 0 {
		delete(m.secrets, name)
	} else {
		m.secrets[name] = slices.Clone(value)
	}
	return m.failWith
}

// Snapshot and Import are not used by the API; the fake has them only to
// satisfy store.Store.
func (m *memStore) Snapshot(func(store.Snapshot) error) error {
	return errors.New("memStore: no snapshots")
}

func (m *memStore) Import(store.Snapshot, bool) error { return errors.New("memStore: no imports") }

func (m *memStore) Size() (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.backup)), nil
}

func (m *memStore) PruneSessions(now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for h, exp := range m.sessions {
		if !now.Before(exp) {
			delete(m.sessions, h)
			n++
		}
	}
	return n, nil
}

func (m *memStore) PruneLogs(before time.Time, batch int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.logs[:0]
	n := 0
	for _, e := range m.logs {
		if e.Timestamp.Before(before) && (batch <= 0 || n < batch) {
			n++
			continue
		}
		kept = append(kept, e)
	}
	m.logs = kept
	return n, nil
}

// PruneLogsToSize counts 100 bytes an entry.
func (m *memStore) PruneLogsToSize(maxBytes int64, batch int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := max(0, len(m.logs)-int(maxBytes/100))
	m.logs = m.logs[n:]
	return n, nil
}

func (m *memStore) Ping(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writeFail != nil {
		return m.writeFail
	}
	return m.failWith
}

func (m *memStore) Describe() string { return "memory" }

func (m *memStore) Close() error { return nil }

// logsCopy returns the log entries oldest first.
func (m *memStore) logsCopy() []store.LogEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.logs)
}

// logCount returns the number of log entries.
func (m *memStore) logCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.logs)
}

// fakeInferer answers with fn and records every request it gets.
type fakeInferer struct {
	mu   sync.Mutex
	fn   func(ctx context.Context, req engine.Request) (engine.Result, error)
	reqs []engine.Request
}

func (f *fakeInferer) Infer(ctx context.Context, req engine.Request) (engine.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	fn := f.fn
	f.mu.Unlock()
	return fn(ctx, req)
}

func (f *fakeInferer) last() engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return engine.Request{}
	}
	return f.reqs[len(f.reqs)-1]
}

func (f *fakeInferer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// echoInferer returns one candidate per requested candidate, built from the
// request's shape (never its text), and transcribes any audio as
// "transcript of N bytes" like a pipeline would, filling the marked message.
func echoInferer(ctx context.Context, req engine.Request) (engine.Result, error) {
	var res engine.Result
	if req.Audio != nil {
		res.HasTranscript = true
		res.Transcript = "transcript of " + strconv.Itoa(len(req.Audio)) + " bytes"
		res.AudioSeconds = 4.2
		res.Timings.Decode = 3 * time.Millisecond
		res.Timings.STT = 40 * time.Millisecond
		if req.OnTranscript != nil {
			req.OnTranscript(res.Transcript)
		}
	}
	for i := 0; i < req.MaxCandidates; i++ {
		res.Candidates = append(res.Candidates, engine.Candidate{
			Text:     "reply " + strconv.Itoa(i+1),
			Rank:     i + 1,
			Length:   2,
			Language: "en",
		})
	}
	res.PartnerTurn = engine.PartnerTurn(req.Messages)
	res.Timings.Prompt = 5 * time.Millisecond
	res.Timings.Generation = 20 * time.Millisecond
	res.PromptTokens, res.CachedTokens, res.GenTokens = 60, 10, 2*req.MaxCandidates
	res.Timings.Queue = time.Millisecond
	res.Timings.Total = 70 * time.Millisecond
	return res, nil
}

// fakeNotifier captures the codes it is asked to send.
type fakeNotifier struct {
	mu    sync.Mutex
	codes []string
	texts []string
	err   error
}

func (n *fakeNotifier) Channel() string { return "console" }

func (n *fakeNotifier) Send(ctx context.Context, code, text string, expiresAt time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	n.codes = append(n.codes, code)
	n.texts = append(n.texts, text)
	return nil
}

func (n *fakeNotifier) textsCopy() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.texts)
}

func (n *fakeNotifier) codesCopy() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.codes)
}

// waitFor polls cond for up to 5 s (alerts are sent in the background).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5 s")
}

// lastCode returns the last code delivered (alerts carry none).
func (n *fakeNotifier) lastCode() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.codes) - 1; i >= 0; i-- {
		if n.codes[i] != "" {
			return n.codes[i]
		}
	}
	return ""
}

// fakeHealth reports fixed engine states.
type fakeHealth struct {
	mu      sync.Mutex
	engines []engine.EngineStatus
	vad     engine.EngineStatus
	depth   int
}

func (h *fakeHealth) VAD() engine.EngineStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vad
}

func (h *fakeHealth) Engines() []engine.EngineStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.engines)
}

func (h *fakeHealth) QueueDepth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.depth
}

func (h *fakeHealth) set(engines ...engine.EngineStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.engines = engines
}

// fakeClock is a settable clock. With tick set, every reading moves it on
// by tick, as a real clock moves between two readings of one request.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	tick time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.tick)
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
