package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Snapshot is everything a store holds, as Store.Snapshot gives it and
// Store.Import takes it: what `replyd store migrate` copies from one store
// to another. Logs are streamed, so that a long log need not fit in memory.
type Snapshot struct {
	AdminKeyHash string
	// Keys in any order (each keeps its CreatedAt).
	Keys []APIKey
	// Prompts in saving order, oldest first: the last one is current.
	Prompts  []PromptVersion
	Sessions []Session
	// Secrets are the installation secrets by name (the pseudonym key
	// above all: without it the copied statistics would count every user
	// again under a new pseudonym).
	Secrets map[string][]byte
	// OTPCodes are the outstanding login codes, one per scope (the client
	// address that asked), in scope order.
	OTPCodes []OTPCode
	// TOTPLastStep is the latest TOTP time step accepted (UseTOTPStep), 0
	// when none was.
	TOTPLastStep int64
	// OTPGuard is the state of the global pause of login by code
	// (OTPFailed with scope "").
	OTPGuard OTPGuard
	// OTPGuards are the guards of the other scopes (client addresses), by
	// scope; nil or empty when there are none.
	OTPGuards map[string]OTPGuard
	// Outcomes are the reported outcomes, by inference id
	// (LogEntry.Inference.ID of the entries in Logs).
	Outcomes map[string]Outcome
	// Memory holds the users with remember: true, by subject, each with its
	// key and its texts in clear; Import seals them again under that key.
	Memory []MemorySnapshot
	// Pairings are the tablet pairings not yet pruned, used or not.
	Pairings []Pairing
	// LiveOff are the key hashes live listening is switched off for
	// (SetLiveOff), sorted. Live tickets are not carried: they expire
	// within a minute.
	LiveOff []string
	// ModelChoices are the boxes' choices of model (SetModelChoice), by
	// Node and then Kind.
	ModelChoices []ModelChoice
	// ModelRecords are the boxes' timings and comparisons of their model
	// files (PutModelRecord), by Node, File and What; nil or empty when
	// there are none.
	ModelRecords []ModelRecord
	// Logs yields every entry, oldest first (by Timestamp, then by
	// appending order). A non-nil error ends the walk.
	Logs iter.Seq2[LogEntry, error] `json:"-"`
}

// MemorySnapshot is one remembering user in a Snapshot.
type MemorySnapshot struct {
	Subject string
	// Tag is the memory's MemoryUser.Tag; Keys the API key hashes linked
	// to it (sorted).
	Tag       string
	Keys      []string
	Key       []byte
	CreatedAt time.Time
	LastAt    time.Time
	Rev       uint64
	// Pairs oldest first.
	Pairs []Pair
	// Texts awaiting feedback, by inference id.
	Texts map[string]RememberedTexts
}

// Session is one admin session as stored.
type Session struct {
	TokenHash string
	ExpiresAt time.Time
}

// OTPCode is one outstanding login code as stored.
type OTPCode struct {
	Scope     string
	Hash      string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// SameData reports whether a and b hold the same data, comparing their
// Snapshots (times as instants, logs entry by entry). When they differ, the
// string names the first difference found.
func SameData(a, b Store) (bool, string, error) {
	var diff string
	err := a.Snapshot(func(sa Snapshot) error {
		return b.Snapshot(func(sb Snapshot) error {
			var err error
			diff, err = snapshotDiff(sa, sb)
			return err
		})
	})
	return diff == "" && err == nil, diff, err
}

// snapshotDiff compares two snapshots.
func snapshotDiff(a, b Snapshot) (string, error) {
	ja, err := canonical(a)
	if err != nil {
		return "", err
	}
	jb, err := canonical(b)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(ja, jb) {
		return "keys, prompts, sessions, pairings, login codes, models or admin key differ", nil
	}
	nextB, stop := iter.Pull2(b.Logs)
	defer stop()
	n := 0
	for ea, err := range a.Logs {
		if err != nil {
			return "", err
		}
		eb, err, ok := nextB()
		if err != nil {
			return "", err
		}
		if !ok {
			return fmt.Sprintf("the first has more log entries than the second (%d+)", n+1), nil
		}
		if ea.Timestamp.Equal(eb.Timestamp) {
			eb.Timestamp = ea.Timestamp
		}
		if !reflect.DeepEqual(ea, eb) {
			return fmt.Sprintf("log entry %d differs", n+1), nil
		}
		n++
	}
	if _, err, ok := nextB(); err != nil {
		return "", err
	} else if ok {
		return fmt.Sprintf("the second has more log entries than the first (%d+)", n+1), nil
	}
	return "", nil
}

// canonical encodes everything but the logs with every time in UTC.
func canonical(s Snapshot) ([]byte, error) {
	s.Logs = nil
	keys := make([]APIKey, len(s.Keys))
	for i, k := range s.Keys {
		k.CreatedAt, k.RevokedAt, k.LastUsedAt = k.CreatedAt.UTC(), k.RevokedAt.UTC(), k.LastUsedAt.UTC()
		keys[i] = k
	}
	s.Keys = keys
	prompts := make([]PromptVersion, len(s.Prompts))
	for i, p := range s.Prompts {
		p.CreatedAt = p.CreatedAt.UTC()
		prompts[i] = p
	}
	s.Prompts = prompts
	sessions := make([]Session, len(s.Sessions))
	for i, ss := range s.Sessions {
		ss.ExpiresAt = ss.ExpiresAt.UTC()
		sessions[i] = ss
	}
	slices.SortFunc(sessions, func(x, y Session) int { return strings.Compare(x.TokenHash, y.TokenHash) })
	s.Sessions = sessions
	codes := make([]OTPCode, len(s.OTPCodes))
	for i, o := range s.OTPCodes {
		o.IssuedAt, o.ExpiresAt = o.IssuedAt.UTC(), o.ExpiresAt.UTC()
		codes[i] = o
	}
	slices.SortFunc(codes, func(x, y OTPCode) int { return strings.Compare(x.Scope, y.Scope) })
	s.OTPCodes = codes
	s.OTPGuard.LastFail, s.OTPGuard.LockedUntil = s.OTPGuard.LastFail.UTC(), s.OTPGuard.LockedUntil.UTC()
	outcomes := make(map[string]Outcome, len(s.Outcomes))
	for id, o := range s.Outcomes {
		o.FirstAt, o.At = o.FirstAt.UTC(), o.At.UTC()
		outcomes[id] = o
	}
	s.Outcomes = outcomes
	memory := make([]MemorySnapshot, len(s.Memory))
	for i, m := range s.Memory {
		m.CreatedAt, m.LastAt = m.CreatedAt.UTC(), m.LastAt.UTC()
		pairs := make([]Pair, len(m.Pairs))
		for j, p := range m.Pairs {
			p.At = p.At.UTC()
			pairs[j] = p
		}
		m.Pairs = pairs
		if len(m.Texts) == 0 {
			m.Texts = nil
		}
		memory[i] = m
	}
	slices.SortFunc(memory, func(x, y MemorySnapshot) int { return strings.Compare(x.Subject, y.Subject) })
	s.Memory = memory
	pairings := make([]Pairing, len(s.Pairings))
	for i, p := range s.Pairings {
		p.CreatedAt, p.ExpiresAt, p.UsedAt = p.CreatedAt.UTC(), p.ExpiresAt.UTC(), p.UsedAt.UTC()
		if len(p.Key.Scopes) == 0 {
			p.Key.Scopes = nil
		}
		pairings[i] = p
	}
	slices.SortFunc(pairings, func(x, y Pairing) int { return strings.Compare(x.CodeHash, y.CodeHash) })
	s.Pairings = pairings
	choices := make([]ModelChoice, len(s.ModelChoices))
	for i, c := range s.ModelChoices {
		c.At = c.At.UTC()
		choices[i] = c
	}
	if len(choices) == 0 {
		choices = nil
	}
	s.ModelChoices = choices
	var records []ModelRecord
	for _, r := range s.ModelRecords {
		r.ModTime, r.At = r.ModTime.UTC(), r.At.UTC()
		records = append(records, r)
	}
	s.ModelRecords = records
	return json.Marshal(s)
}
