package store

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxSeriesBuckets bounds the number of buckets StatsSeries computes.
const MaxSeriesBuckets = 10000

// StatsRow is one infer call as Stats counts it. Every Store
// implementation feeds its rows to a StatsBuilder, so the arithmetic of the
// statistics exists once.
type StatsRow struct {
	Subject   string
	KeyHash   string
	Status    int
	ErrorCode string
	LatencyMS int64
	// PromptVersion is set on answered inferences (Answered).
	PromptVersion string
	Answered      bool
	Outcome       *Outcome
}

// StatsBuilder accumulates StatsRows into Stats. The zero value is not
// usable; call NewStatsBuilder.
type StatsBuilder struct {
	s        Stats
	users    map[string]struct{}
	lat      []int64
	out      outcomeAcc
	keys     map[string]*keyAcc
	versions map[string]*VersionStats
	vorder   []string
}

type keyAcc struct {
	ks  KeyStats
	out outcomeAcc
}

// outcomeAcc accumulates OutcomeStats; ttc holds the reported times.
type outcomeAcc struct {
	OutcomeStats
	ttc []int64
}

func (a *outcomeAcc) add(o *Outcome) {
	a.Outcomes++
	if o.Accepted() {
		a.Accepted++
		if a.RankCounts == nil {
			a.RankCounts = map[int]int{}
		}
		a.RankCounts[o.Rank]++
	}
	if o.Kind == OutcomeNoneFit {
		a.NoneFit++
	}
	a.KeystrokesSaved += o.KeystrokesSaved
	if o.TimeToChoiceMS >= 0 {
		a.ttc = append(a.ttc, o.TimeToChoiceMS)
	}
}

func (a *outcomeAcc) result() OutcomeStats {
	s := a.OutcomeStats
	if s.RankCounts == nil {
		s.RankCounts = map[int]int{}
	}
	s.TimeToChoice = percentiles(a.ttc)
	return s
}

// NewStatsBuilder returns an empty builder.
func NewStatsBuilder() *StatsBuilder {
	return &StatsBuilder{
		s:        Stats{Errors: map[string]int{}},
		users:    map[string]struct{}{},
		keys:     map[string]*keyAcc{},
		versions: map[string]*VersionStats{},
	}
}

// Add counts one infer call. Rows must come in time order for
// ByPromptVersion to list versions in the order they were first used.
func (b *StatsBuilder) Add(r StatsRow) {
	b.s.TotalRequests++
	if r.Subject != "" {
		b.users[r.Subject] = struct{}{}
	}
	failed := r.Status >= 400 || r.ErrorCode != ""
	if failed {
		code := r.ErrorCode
		if code == "" {
			code = "http_" + strconv.Itoa(r.Status)
		}
		b.s.Errors[code]++
	} else if r.Status >= 200 && r.Status < 300 {
		b.lat = append(b.lat, r.LatencyMS)
	}
	if r.KeyHash != "" {
		k := b.keys[r.KeyHash]
		if k == nil {
			k = &keyAcc{ks: KeyStats{KeyHash: r.KeyHash}}
			b.keys[r.KeyHash] = k
		}
		k.ks.Requests++
		if failed {
			k.ks.Errors++
		}
		if r.Outcome != nil {
			k.out.add(r.Outcome)
		}
	}
	if r.Outcome != nil {
		b.out.add(r.Outcome)
	}
	if r.Answered {
		v := b.versions[r.PromptVersion]
		if v == nil {
			v = &VersionStats{Version: r.PromptVersion}
			b.versions[r.PromptVersion] = v
			b.vorder = append(b.vorder, r.PromptVersion)
		}
		v.Inferences++
		if r.Outcome != nil {
			v.Outcomes++
			if r.Outcome.Accepted() {
				v.Accepted++
			}
		}
	}
}

// Stats returns the counters of the rows added so far.
func (b *StatsBuilder) Stats() Stats {
	s := b.s
	s.ActiveUsers = len(b.users)
	s.Latency = percentiles(b.lat)
	s.OutcomeStats = b.out.result()
	s.ByKey = make([]KeyStats, 0, len(b.keys))
	for _, k := range b.keys {
		ks := k.ks
		ks.OutcomeStats = k.out.result()
		s.ByKey = append(s.ByKey, ks)
	}
	slices.SortFunc(s.ByKey, func(x, y KeyStats) int {
		if c := cmp.Compare(y.Requests, x.Requests); c != 0 {
			return c
		}
		return cmp.Compare(x.KeyHash, y.KeyHash)
	})
	s.ByPromptVersion = make([]VersionStats, 0, len(b.vorder))
	for _, v := range b.vorder {
		s.ByPromptVersion = append(s.ByPromptVersion, *b.versions[v])
	}
	return s
}

// percentiles returns the nearest-rank 50th and 95th percentiles of v,
// which it sorts.
func percentiles(v []int64) Percentiles {
	p := Percentiles{N: len(v)}
	if len(v) == 0 {
		return p
	}
	slices.Sort(v)
	rank := func(q float64) int64 {
		i := int(math.Ceil(q*float64(len(v)))) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	p.P50, p.P95 = rank(0.50), rank(0.95)
	return p
}

// Stats counts the StreamInfer entries with since <= Timestamp < until:
// requests, distinct subjects, errors by code, latency percentiles, the
// outcomes, and the same per API key and per system-prompt version. It
// seeks to since in a time-ordered index of compact rows, so its cost grows
// with the window, not with the whole log.
func (db *DB) Stats(since, until time.Time) (Stats, error) {
	b := NewStatsBuilder()
	if !until.After(since) {
		return b.Stats(), nil
	}
	from, to := nanos(since), nanos(until)
	err := db.view(func(tx *bolt.Tx) error {
		intern := map[string]string{}
		var o Outcome
		c := tx.Bucket(bucketInferIdx).Cursor()
		for k, v := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, v = c.Next() {
			row, err := decodeStatsRow(v, intern, &o)
			if err != nil {
				return err
			}
			b.Add(row)
		}
		return nil
	})
	return b.Stats(), err
}

// StatsSeries splits [since, until) into consecutive buckets of the given
// width starting at since (the last one may reach past until but counts
// nothing at or after until) and returns the requests, active users,
// outcomes and accepted outcomes of each, empty buckets included, oldest
// first. bucket must be positive and the series at most MaxSeriesBuckets
// long.
func (db *DB) StatsSeries(since, until time.Time, bucket time.Duration) ([]StatsBucket, error) {
	if bucket <= 0 {
		return nil, invalid("bucket width %s is not positive", bucket)
	}
	if !until.After(since) {
		return []StatsBucket{}, nil
	}
	span := until.Sub(since)
	n := int64(span / bucket)
	if span%bucket != 0 {
		n++
	}
	if n > MaxSeriesBuckets {
		return nil, invalid("%d buckets of %s exceed the maximum of %d", n, bucket, MaxSeriesBuckets)
	}
	out := make([]StatsBucket, n)
	for i := range out {
		out[i].Start = since.Add(time.Duration(i) * bucket)
	}
	from, to, width := nanos(since), nanos(until), uint64(bucket)
	err := db.view(func(tx *bolt.Tx) error {
		// Keys come in time order, so bucket indexes only grow: a subject is
		// new to bucket i exactly when the last bucket it was counted in is
		// not i. One map for the whole series, one entry per subject.
		lastBucket := make(map[string]*uint64) // pointers: updating needs no key string
		intern := map[string]string{}
		var o Outcome
		c := tx.Bucket(bucketInferIdx).Cursor()
		for k, v := c.Seek(u64(from)); k != nil && keyNanos(k) < to; k, v = c.Next() {
			i := (keyNanos(k) - from) / width
			row, err := decodeStatsRow(v, intern, &o)
			if err != nil {
				return err
			}
			out[i].TotalRequests++
			if o := row.Outcome; o != nil {
				out[i].Outcomes++
				if o.Accepted() {
					out[i].Accepted++
				}
			}
			if row.Subject == "" {
				continue
			}
			last := lastBucket[row.Subject]
			if last == nil {
				last = new(uint64)
				*last = i
				lastBucket[row.Subject] = last
			} else if *last == i {
				continue
			}
			*last = i
			out[i].ActiveUsers++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
