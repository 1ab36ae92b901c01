package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// Inference returns the answered inference with this inference_id, with
// its remembered texts while they are kept, or ErrNotFound. The caller
// applies the feedback rules (the key, FeedbackWindow, ReplaceWindow).
func (db *DB) Inference(id string) (store.Inference, error) {
	var inf store.Inference
	err := db.view(func(tx *bolt.Tx) error {
		lk, row, err := inferenceRow(tx, id)
		if errors.Is(err, store.ErrNotFound) && lk != nil {
			inf, err = steeredInference(tx, lk)
			return err
		}
		if err != nil {
			return err
		}
		inf = inferenceOf(lk, row)
		if row.remembered {
			u, err := getUser(tx, row.subject)
			if err != nil {
				return err
			}
			if inf.Texts, err = getTexts(tx, u, row.subject, lk); err != nil {
				return err
			}
		}
		return nil
	})
	return inf, err
}

// inferenceRow finds the index row of an inference id.
func inferenceRow(tx *bolt.Tx, id string) ([]byte, inferRow, error) {
	lk := tx.Bucket(bucketInferences).Get([]byte(id))
	if len(lk) != 16 {
		return nil, inferRow{}, fmt.Errorf("store: inference: %w", store.ErrNotFound)
	}
	v := tx.Bucket(bucketInferIdx).Get(lk)
	if v == nil {
		// A steered answer's key (steered.go), or none.
		return append([]byte(nil), lk...), inferRow{}, fmt.Errorf("store: inference: %w", store.ErrNotFound)
	}
	row, err := decodeRow(v)
	return append([]byte(nil), lk...), row, err
}

func inferenceOf(lk []byte, row inferRow) store.Inference {
	return store.Inference{
		ID: row.inferenceID, At: fromNanos(keyNanos(lk)), KeyHash: row.keyHash, Subject: row.subject,
		PromptVersion: row.promptVersion, CandidateChars: row.candidateChars,
		Remembered: row.remembered, Outcome: row.outcome,
	}
}

// SetOutcome records o as the outcome of the inference with this id,
// replacing any earlier one, or returns ErrNotFound. For an inference made
// with remember: true whose texts are still kept, reply (what the user
// said) and the partner's turn become the user's pair for this inference,
// encrypted; an empty reply removes that pair. It returns the user's new
// memory revision (0 when no pair changed). The rules of who may report and
// when are the caller's; this is one transaction.
func (db *DB) SetOutcome(id string, o store.Outcome, reply string) (uint64, error) {
	var rev uint64
	// Batch: concurrent reports share one commit (the pages near the root
	// and the meta page are written once for all of them). Batch may run
	// the function more than once (a failed batch is retried one call at a
	// time); it only depends on its arguments and the Tx.
	err := db.noteWrite(db.batch(func(tx *bolt.Tx) error {
		rev = 0
		lk, row, err := inferenceRow(tx, id)
		if err != nil {
			return err
		}
		row.outcome = &o
		if err := tx.Bucket(bucketInferIdx).Put(lk, row.encode()); err != nil {
			return err
		}
		if !row.remembered {
			return nil
		}
		u, err := getUser(tx, row.subject)
		if err != nil || u == nil {
			return err
		}
		texts, err := getTexts(tx, u, row.subject, lk)
		if err != nil || texts == nil {
			return err
		}
		if reply != "" {
			p := store.Pair{InferenceID: id, Partner: texts.Partner, Reply: reply}
			if err := putPair(tx, u, row.subject, lk, p); err != nil {
				return err
			}
			u.LastAt = o.At.UTC()
		} else if err := tx.Bucket(bucketMemPairs).Delete(memKey(row.subject, lk)); err != nil {
			return err
		}
		u.Rev++
		rev = u.Rev
		return putUser(tx, row.subject, u)
	}))
	return rev, err
}

// outcomePage is how many outcomes Outcomes reads per read transaction
// (a variable so that tests can page through a few).
var outcomePage = 256

// Outcomes calls fn for every reported outcome of an inference made with
// since <= time < until, oldest first, with the remembered pair where the
// user opted in and it is kept. It reads in short read transactions of a
// few hundred entries and calls fn outside them, so a slow fn (a download)
// holds up nothing. fn's error stops the walk and is returned.
func (db *DB) Outcomes(since, until time.Time, fn func(store.OutcomeRecord) error) error {
	from, to := u64(nanos(since)), nanos(until)
	for {
		var page []store.OutcomeRecord
		var next []byte
		err := db.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketInferIdx).Cursor()
			pairs := tx.Bucket(bucketMemPairs)
			users := map[string]*userRecord{}
			for k, v := c.Seek(from); k != nil && keyNanos(k) < to; k, v = c.Next() {
				if len(page) == outcomePage {
					next = append([]byte(nil), k...)
					return nil
				}
				row, err := decodeRow(v)
				if err != nil {
					return err
				}
				if row.outcome == nil {
					continue
				}
				rec := store.OutcomeRecord{Inference: inferenceOf(k, row)}
				if row.remembered {
					u, ok := users[row.subject]
					if !ok {
						if u, err = getUser(tx, row.subject); err != nil {
							return err
						}
						users[row.subject] = u
					}
					mk := memKey(row.subject, k)
					if pv := pairs.Get(mk); pv != nil && u != nil {
						p, err := openPair(u, mk, pv)
						if err != nil {
							return err
						}
						rec.Pair = &p
					}
				}
				page = append(page, rec)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

// snapshotOutcomes reads the outcomes and the memory into snap.
func snapshotOutcomes(tx *bolt.Tx, snap *store.Snapshot) error {
	idx := tx.Bucket(bucketInferIdx)
	err := idx.ForEach(func(_, v []byte) error {
		row, err := decodeRow(v)
		if err != nil {
			return err
		}
		if row.outcome != nil && row.inferenceID != "" {
			snap.Outcomes[row.inferenceID] = *row.outcome
		}
		return nil
	})
	if err != nil {
		return err
	}
	return eachUser(tx, func(subject string, u *userRecord, keys []string) error {
		m := store.MemorySnapshot{Subject: subject, Tag: u.tagOf(subject), Keys: keys, Key: append([]byte(nil), u.Key...), CreatedAt: u.CreatedAt, LastAt: u.LastAt,
			Rev: u.Rev, Pairs: []store.Pair{}, Texts: map[string]store.RememberedTexts{}}
		prefix := memPrefix(subject)
		c := tx.Bucket(bucketMemPairs).Cursor()
		for pk, pv := c.Seek(prefix); pk != nil && bytes.HasPrefix(pk, prefix); pk, pv = c.Next() {
			p, err := openPair(u, pk, pv)
			if err != nil {
				return err
			}
			m.Pairs = append(m.Pairs, p)
		}
		c = tx.Bucket(bucketMemInfer).Cursor()
		for tk, _ := c.Seek(prefix); tk != nil && bytes.HasPrefix(tk, prefix); tk, _ = c.Next() {
			lk := append([]byte(nil), tk[len(prefix):]...)
			rv := idx.Get(lk)
			if rv == nil {
				continue // its log entry was pruned: nobody can report on it
			}
			row, err := decodeRow(rv)
			if err != nil {
				return err
			}
			t, err := getTexts(tx, u, subject, lk)
			if err != nil {
				return err
			}
			if t != nil && row.inferenceID != "" {
				m.Texts[row.inferenceID] = *t
			}
		}
		snap.Memory = append(snap.Memory, m)
		return nil
	})
}

// importOutcomes writes snap's outcomes and memory after its logs, whose
// new keys logKeys gives by inference id. A pair whose log entry was pruned
// gets a key of its own time.
func importOutcomes(tx *bolt.Tx, snap store.Snapshot, logKeys map[string][]byte) error {
	idx := tx.Bucket(bucketInferIdx)
	update := func(id string, fn func(*inferRow)) error {
		lk := logKeys[id]
		if lk == nil {
			return nil
		}
		row, err := decodeRow(idx.Get(lk))
		if err != nil {
			return err
		}
		fn(&row)
		return idx.Put(lk, row.encode())
	}
	for id, o := range snap.Outcomes {
		if err := update(id, func(r *inferRow) { r.outcome = &o }); err != nil {
			return err
		}
	}
	pairs := tx.Bucket(bucketMemPairs)
	for _, m := range snap.Memory {
		if m.Subject == "" || len(m.Key) != store.UserKeySize {
			return invalid("a memory user with an empty subject or a key of %d bytes", len(m.Key))
		}
		u := &userRecord{Key: m.Key, CreatedAt: m.CreatedAt, LastAt: m.LastAt, Rev: m.Rev}
		if m.Tag != m.Subject {
			u.Tag = m.Tag
		}
		if err := putUser(tx, m.Subject, u); err != nil {
			return err
		}
		for _, k := range m.Keys {
			lk := linkKey(k, u.tagOf(m.Subject))
			if k == "" || tx.Bucket(bucketMemLinks).Get(lk) != nil {
				return invalid("a key is linked to two memories of one user, or is empty")
			}
			if err := putLink(tx, k, u.tagOf(m.Subject), m.Subject); err != nil {
				return err
			}
		}
		remembered := func(r *inferRow) { r.remembered = true }
		for _, p := range m.Pairs {
			lk := logKeys[p.InferenceID]
			if lk == nil {
				seq, err := pairs.NextSequence()
				if err != nil {
					return err
				}
				lk = timeKey(p.At, seq)
			}
			if err := putPair(tx, u, m.Subject, lk, p); err != nil {
				return err
			}
			if err := update(p.InferenceID, remembered); err != nil {
				return err
			}
		}
		for id, t := range m.Texts {
			lk := logKeys[id]
			if lk == nil {
				continue
			}
			if err := putTexts(tx, m.Subject, m.Tag, "", lk, &t, m.CreatedAt); err != nil {
				return err
			}
			if err := update(id, remembered); err != nil {
				return err
			}
		}
	}
	return nil
}
