package store

import (
	"cmp"
	"math"
	"slices"
	"strconv"
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
	// Model is the language model that answered (InferenceInfo.Model; ""
	// when unknown).
	Model string
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
	models   map[string]*modelAcc
	morder   []string
	ksr      map[[2]string]*KSRStats
}

type modelAcc struct {
	ms  ModelStats
	lat []int64
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
		models:   map[string]*modelAcc{},
		ksr:      map[[2]string]*KSRStats{},
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
		if mode, ok := r.Outcome.KSRCounts(); ok {
			k := [2]string{mode, r.PromptVersion}
			a := b.ksr[k]
			if a == nil {
				a = &KSRStats{SteerMode: mode, PromptVersion: r.PromptVersion}
				b.ksr[k] = a
			}
			a.Replies++
			a.Chars += r.Outcome.SpokenChars
			a.Actions += r.Outcome.KeysPressed + r.Outcome.Selections
		}
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
		if r.Model != "" {
			m := b.models[r.Model]
			if m == nil {
				m = &modelAcc{ms: ModelStats{Model: r.Model}}
				b.models[r.Model] = m
				b.morder = append(b.morder, r.Model)
			}
			m.ms.Inferences++
			m.lat = append(m.lat, r.LatencyMS)
			if r.Outcome != nil {
				m.ms.Outcomes++
				if r.Outcome.Accepted() {
					m.ms.Accepted++
				}
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
	s.ByModel = make([]ModelStats, 0, len(b.morder))
	for _, m := range b.morder {
		a := b.models[m]
		ms := a.ms
		ms.Latency = percentiles(a.lat)
		s.ByModel = append(s.ByModel, ms)
	}
	for _, a := range b.ksr {
		s.KSR = append(s.KSR, *a)
	}
	slices.SortFunc(s.KSR, func(x, y KSRStats) int {
		if c := cmp.Compare(x.SteerMode, y.SteerMode); c != 0 {
			return c
		}
		return cmp.Compare(x.PromptVersion, y.PromptVersion)
	})
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
