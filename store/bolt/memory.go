package bolt

// The user's own voice: for a user_id sent with remember: true, the store
// keeps pairs (the partner's turn → what the user really said) so that the
// next suggestions can follow how this person answers.
//
// Every text is encrypted with AES-256-GCM under a key of its own user,
// kept in the mem_users bucket; the row's key is the associated data, so a
// ciphertext opens only where it was written. DeleteUser destroys the key
// and every row of the user, then overwrites the file's free pages with
// zeros (ScrubFreePages), so that no earlier copy of the key or of a text
// survives in the file or in a backup taken afterwards.
//
// Rows are keyed "subject ‖ 0x00 ‖ log key", where the log key ("nanos ‖
// seq") is that of the inference's log entry: a user's rows are contiguous
// and in time order, and each inference has at most one pair.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/replyd/replyd/store"
)

// userRecord is a mem_users value.
type userRecord struct {
	Key []byte `json:"key"`
	// Tag is the user's MemoryUser.Tag; empty for memories made before
	// memories were scoped to keys, whose tag is their subject.
	Tag       string    `json:"tag,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	LastAt    time.Time `json:"last_at,omitzero"`
	Rev       uint64    `json:"rev"`
}

// memKey is the key of a user's row for the inference logged under logKey.
func memKey(subject string, logKey []byte) []byte {
	k := make([]byte, 0, len(subject)+1+len(logKey))
	k = append(k, subject...)
	k = append(k, 0)
	return append(k, logKey...)
}

// memPrefix is the common prefix of a user's rows.
func memPrefix(subject string) []byte { return append([]byte(subject), 0) }

// aadOf binds a ciphertext to its bucket and row.
func aadOf(bucket, key []byte) []byte {
	return append(append(append([]byte(nil), bucket...), '/'), key...)
}

func getUser(tx *bolt.Tx, subject string) (*userRecord, error) {
	v := tx.Bucket(bucketMemUsers).Get([]byte(subject))
	if v == nil {
		return nil, nil
	}
	var u userRecord
	if err := json.Unmarshal(v, &u); err != nil {
		return nil, fmt.Errorf("store: decode memory user: %w", err)
	}
	return &u, nil
}

func putUser(tx *bolt.Tx, subject string, u *userRecord) error {
	v, err := json.Marshal(u)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMemUsers).Put([]byte(subject), v)
}

// ensureUser returns the user's record, creating it with a fresh key, tag
// (the subject when empty) and a link from keyHash (when not empty, and the
// key has no link for the tag yet).
func ensureUser(tx *bolt.Tx, subject, tag, keyHash string, now time.Time) (*userRecord, error) {
	u, err := getUser(tx, subject)
	if err != nil || u != nil {
		return u, err
	}
	key, err := store.NewUserKey()
	if err != nil {
		return nil, err
	}
	u = &userRecord{Key: key, CreatedAt: now.UTC(), Rev: 1}
	if tag != subject {
		u.Tag = tag
	}
	if err := putUser(tx, subject, u); err != nil {
		return nil, err
	}
	if tag == "" {
		tag = subject
	}
	if keyHash != "" && tx.Bucket(bucketMemLinks).Get(linkKey(keyHash, tag)) == nil {
		if err := putLink(tx, keyHash, tag, subject); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// tagOf is the user's tag.
func (u *userRecord) tagOf(subject string) string {
	if u.Tag != "" {
		return u.Tag
	}
	return subject
}

// linkKey is the mem_links key of key keyHash's link for tag.
func linkKey(keyHash, tag string) []byte {
	k := make([]byte, 0, len(keyHash)+1+len(tag))
	k = append(k, keyHash...)
	k = append(k, 0)
	return append(k, tag...)
}

func putLink(tx *bolt.Tx, keyHash, tag, subject string) error {
	return tx.Bucket(bucketMemLinks).Put(linkKey(keyHash, tag), []byte(subject))
}

// linksOf returns the key hashes linked to each subject, sorted.
func linksOf(tx *bolt.Tx) (map[string][]string, error) {
	out := map[string][]string{}
	b := tx.Bucket(bucketMemLinks)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			return errBadRow
		}
		out[string(v)] = append(out[string(v)], string(k[:i]))
		return nil
	})
	for _, keys := range out {
		slices.Sort(keys)
	}
	return out, err
}

// eachUser calls fn for every user with a memory, in the order of their
// subjects, with the user's record and the key hashes linked to it.
func eachUser(tx *bolt.Tx, fn func(subject string, u *userRecord, keys []string) error) error {
	links, err := linksOf(tx)
	if err != nil {
		return err
	}
	return eachJSON(tx.Bucket(bucketMemUsers), nil, "memory user", func(k []byte, u userRecord) error {
		return fn(string(k), &u, links[string(k)])
	})
}

// deleteLinksTo deletes every link to subject.
func deleteLinksTo(tx *bolt.Tx, subject string) error {
	b := tx.Bucket(bucketMemLinks)
	if b == nil {
		return nil
	}
	_, err := deleteWhere(b, func(_, v []byte) bool { return string(v) == subject })
	return err
}

// MemorySubject returns the memory key keyHash is linked to for tag, or "".
func (db *DB) MemorySubject(keyHash, tag string) (string, error) {
	var subject string
	err := db.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMemLinks); b != nil {
			subject = string(b.Get(linkKey(keyHash, tag)))
		}
		return nil
	})
	return subject, err
}

// LinkMemory links key keyHash to the memory user subject, under the
// user's tag, replacing the key's earlier link for that tag.
func (db *DB) LinkMemory(keyHash, subject string) error {
	if keyHash == "" || subject == "" {
		return invalid("empty key hash or subject")
	}
	return db.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketKeys).Get([]byte(keyHash)) == nil {
			return fmt.Errorf("store: API key: %w", store.ErrNotFound)
		}
		u, err := getUser(tx, subject)
		if err != nil {
			return err
		}
		if u == nil {
			return fmt.Errorf("store: memory user: %w", store.ErrNotFound)
		}
		return putLink(tx, keyHash, u.tagOf(subject), subject)
	})
}

// UnlinkMemory removes key keyHash's link to subject.
func (db *DB) UnlinkMemory(keyHash, subject string) error {
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMemLinks)
		prefix := append([]byte(keyHash), 0)
		var dead [][]byte
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if string(v) == subject {
				dead = append(dead, append([]byte(nil), k...))
			}
		}
		if len(dead) == 0 {
			return fmt.Errorf("store: memory link: %w", store.ErrNotFound)
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// migrateMemoryLinks gives every memory of a file of schema 3 (found by
// the user_id's pseudonym alone, its tag) to the keys that wrote it: the
// keys of the inferences whose pairs or awaiting texts it holds.
func migrateMemoryLinks(tx *bolt.Tx) error {
	idx := tx.Bucket(bucketInferIdx)
	links := tx.Bucket(bucketMemLinks)
	for _, b := range [][]byte{bucketMemPairs, bucketMemInfer} {
		c := tx.Bucket(b).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				continue
			}
			subject, lk := string(k[:i]), k[i+1:]
			v := idx.Get(lk)
			if v == nil {
				continue // its log entry was pruned: the key is not known
			}
			row, err := decodeRow(v)
			if err != nil {
				return err
			}
			if row.keyHash == "" || links.Get(linkKey(row.keyHash, subject)) != nil {
				continue
			}
			if err := putLink(tx, row.keyHash, subject, subject); err != nil {
				return err
			}
		}
	}
	return nil
}

// putTexts stores an inference's partner turn and candidates, encrypted,
// until its feedback arrives.
func putTexts(tx *bolt.Tx, subject, tag, keyHash string, logKey []byte, t *store.RememberedTexts, now time.Time) error {
	u, err := ensureUser(tx, subject, tag, keyHash, now)
	if err != nil {
		return err
	}
	k := memKey(subject, logKey)
	sealed, err := store.SealStrings(u.Key, aadOf(bucketMemInfer, k), append([]string{t.Partner}, t.Candidates...)...)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMemInfer).Put(k, sealed)
}

// getTexts opens an inference's remembered texts; nil when not kept.
func getTexts(tx *bolt.Tx, u *userRecord, subject string, logKey []byte) (*store.RememberedTexts, error) {
	k := memKey(subject, logKey)
	v := tx.Bucket(bucketMemInfer).Get(k)
	if v == nil || u == nil {
		return nil, nil
	}
	ss, err := store.OpenStrings(u.Key, aadOf(bucketMemInfer, k), v)
	if err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, errBadRow
	}
	return &store.RememberedTexts{Partner: ss[0], Candidates: ss[1:]}, nil
}

// putPair stores (or replaces) the pair of the inference logged at logKey.
func putPair(tx *bolt.Tx, u *userRecord, subject string, logKey []byte, p store.Pair) error {
	k := memKey(subject, logKey)
	sealed, err := store.SealStrings(u.Key, aadOf(bucketMemPairs, k), p.InferenceID, p.Partner, p.Reply)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMemPairs).Put(k, sealed)
}

// openPair decrypts the pair stored under k (a memKey).
func openPair(u *userRecord, k, v []byte) (store.Pair, error) {
	ss, err := store.OpenStrings(u.Key, aadOf(bucketMemPairs, k), v)
	if err != nil {
		return store.Pair{}, err
	}
	if len(ss) != 3 {
		return store.Pair{}, errBadRow
	}
	return store.Pair{InferenceID: ss[0], At: fromNanos(keyNanos(k[len(k)-16:])), Partner: ss[1], Reply: ss[2]}, nil
}

// countPrefix counts the keys of b that start with prefix.
func countPrefix(b *bolt.Bucket, prefix []byte) int {
	n := 0
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		n++
	}
	return n
}

// MemoryUsers returns every user with a memory (an encryption key), in the
// order of their subjects, with the number of pairs kept for each.
func (db *DB) MemoryUsers() ([]store.MemoryUser, error) {
	out := []store.MemoryUser{}
	err := db.view(func(tx *bolt.Tx) error {
		pairs := tx.Bucket(bucketMemPairs)
		return eachUser(tx, func(subject string, u *userRecord, keys []string) error {
			out = append(out, store.MemoryUser{
				Subject: subject, Tag: u.tagOf(subject), Keys: keys, Pairs: countPrefix(pairs, memPrefix(subject)),
				CreatedAt: u.CreatedAt, LastAt: u.LastAt, Rev: u.Rev,
			})
			return nil
		})
	})
	return out, err
}

// MemoryRev returns the revision of the user's pairs: it changes whenever
// they change, and is 0 when the user has no memory. It reads one small
// record, so recall caches may call it on every inference.
func (db *DB) MemoryRev(subject string) (uint64, error) {
	var rev uint64
	err := db.view(func(tx *bolt.Tx) error {
		u, err := getUser(tx, subject)
		if u != nil {
			rev = u.Rev
		}
		return err
	})
	return rev, err
}

// MemoryPairs returns the user's pairs, decrypted, oldest first, and the
// revision they are at. A user without memory has none (and revision 0).
func (db *DB) MemoryPairs(subject string) ([]store.Pair, uint64, error) {
	out := []store.Pair{}
	var rev uint64
	err := db.view(func(tx *bolt.Tx) error {
		u, err := getUser(tx, subject)
		if err != nil || u == nil {
			return err
		}
		rev = u.Rev
		prefix := memPrefix(subject)
		c := tx.Bucket(bucketMemPairs).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			p, err := openPair(u, k, v)
			if err != nil {
				return fmt.Errorf("store: pair of memory user: %w", err)
			}
			out = append(out, p)
		}
		return nil
	})
	return out, rev, err
}

// DeleteUser destroys everything the store holds for the user named by
// subject: the encryption key, the pairs, the texts awaiting feedback, and
// the reported outcomes of the user's inferences, whose ids go too (they can
// no longer be reported on, and their log entries lose Inference). The
// counts of the log entries stay. Then it overwrites
// the file's free pages with zeros (ScrubFreePages), so that when it
// returns no byte of the key or of a text is left anywhere in the file. It
// returns ErrNotFound when nothing was stored for the user.
func (db *DB) DeleteUser(subject string) (store.UserDeletion, error) {
	d, err := db.deleteUserRows(subject)
	if err != nil {
		return d, err
	}
	d.ScrubbedPages, d.Scrub, err = db.ScrubFreePages()
	return d, err
}

// deleteUserRows is DeleteUser's transaction, without the scrub.
func (db *DB) deleteUserRows(subject string) (store.UserDeletion, error) {
	var d store.UserDeletion
	if subject == "" {
		return d, invalid("empty subject")
	}
	err := db.update(func(tx *bolt.Tx) error {
		d = store.UserDeletion{}
		users := tx.Bucket(bucketMemUsers)
		if users.Get([]byte(subject)) != nil {
			d.Key = true
			if err := users.Delete([]byte(subject)); err != nil {
				return err
			}
		}
		if err := deleteLinksTo(tx, subject); err != nil {
			return err
		}
		var err error
		if d.Pairs, err = deletePrefix(tx.Bucket(bucketMemPairs), memPrefix(subject)); err != nil {
			return err
		}
		if d.Pending, err = deletePrefix(tx.Bucket(bucketMemInfer), memPrefix(subject)); err != nil {
			return err
		}
		// The user's outcomes: clear them from the index, and forget the
		// inference ids so no later report brings one back.
		idx, ids, logs := tx.Bucket(bucketInferIdx), tx.Bucket(bucketInferences), tx.Bucket(bucketLogs)
		type change struct{ k, v, entry []byte }
		var changes []change
		c := idx.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			row, err := decodeRow(v)
			if err != nil {
				return err
			}
			if row.subject != subject || (row.outcome == nil && !row.remembered && row.inferenceID == "") {
				continue
			}
			if row.outcome != nil {
				d.Outcomes++
			}
			if row.inferenceID != "" {
				if err := ids.Delete([]byte(row.inferenceID)); err != nil {
					return err
				}
			}
			row.outcome, row.remembered, row.inferenceID = nil, false, ""
			ch := change{k: append([]byte(nil), k...), v: row.encode()}
			if raw := logs.Get(k); raw != nil {
				var e store.LogEntry
				if err := json.Unmarshal(raw, &e); err != nil {
					return fmt.Errorf("store: decode log entry: %w", err)
				}
				e.Inference = nil // the id goes with the outcome
				if ch.entry, err = json.Marshal(e); err != nil {
					return err
				}
			}
			changes = append(changes, ch)
		}
		for _, ch := range changes {
			if err := idx.Put(ch.k, ch.v); err != nil {
				return err
			}
			if ch.entry != nil {
				if err := logs.Put(ch.k, ch.entry); err != nil {
					return err
				}
			}
		}
		if !d.Key && d.Pairs == 0 && d.Pending == 0 && d.Outcomes == 0 {
			return fmt.Errorf("store: memory user: %w", store.ErrNotFound)
		}
		return nil
	})
	return d, err
}

// deletePrefix deletes the keys of b that start with prefix.
func deletePrefix(b *bolt.Bucket, prefix []byte) (int, error) {
	var dead [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		dead = append(dead, append([]byte(nil), k...))
	}
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(dead), nil
}

// PruneMemory deletes the pairs of inferences made before pairsBefore (a
// zero time keeps every pair), the texts awaiting feedback of inferences
// made before textsBefore, and the users (with their keys) that are left
// with neither and were created before both times. When it deleted
// anything it scrubs the free pages, as DeleteUser does.
func (db *DB) PruneMemory(pairsBefore, textsBefore time.Time) (store.MemoryPrune, error) {
	var p store.MemoryPrune
	err := db.update(func(tx *bolt.Tx) error {
		p = store.MemoryPrune{}
		touched := map[string]bool{}
		prune := func(b *bolt.Bucket, before time.Time) (int, error) {
			if before.IsZero() {
				return 0, nil
			}
			cut := nanos(before)
			var dead [][]byte
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if len(k) < 17 || keyNanos(k[len(k)-16:]) >= cut {
					continue
				}
				dead = append(dead, append([]byte(nil), k...))
			}
			for _, k := range dead {
				if err := b.Delete(k); err != nil {
					return 0, err
				}
				touched[string(k[:len(k)-17])] = true
			}
			return len(dead), nil
		}
		var err error
		if p.Pairs, err = prune(tx.Bucket(bucketMemPairs), pairsBefore); err != nil {
			return err
		}
		pairsTouched := touched
		touched = map[string]bool{}
		if p.Pending, err = prune(tx.Bucket(bucketMemInfer), textsBefore); err != nil {
			return err
		}
		users := tx.Bucket(bucketMemUsers)
		var subjects []string
		if err := users.ForEach(func(k, _ []byte) error { subjects = append(subjects, string(k)); return nil }); err != nil {
			return err
		}
		for _, s := range subjects {
			u, err := getUser(tx, s)
			if err != nil {
				return err
			}
			prefix := memPrefix(s)
			old := (pairsBefore.IsZero() || u.CreatedAt.Before(pairsBefore)) && u.CreatedAt.Before(textsBefore)
			if old && countPrefix(tx.Bucket(bucketMemPairs), prefix) == 0 && countPrefix(tx.Bucket(bucketMemInfer), prefix) == 0 {
				if err := users.Delete([]byte(s)); err != nil {
					return err
				}
				if err := deleteLinksTo(tx, s); err != nil {
					return err
				}
				p.Users++
				continue
			}
			if pairsTouched[s] {
				u.Rev++
				if err := putUser(tx, s, u); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || p == (store.MemoryPrune{}) {
		return p, err
	}
	_, _, err = db.ScrubFreePages()
	return p, err
}
