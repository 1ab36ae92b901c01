package store

import (
	"fmt"
	"math"
	"time"
)

// CountSeries is StatsSeries's frame for every implementation: it checks
// the arguments, makes the empty buckets with their Start set (newSeries)
// and, unless the window is empty, has count fill them in; an error from
// count is returned with no series.
func CountSeries(since, until time.Time, bucket time.Duration, count func(out []StatsBucket) error) ([]StatsBucket, error) {
	out, err := newSeries(since, until, bucket)
	if err != nil || len(out) == 0 {
		return out, err
	}
	if err := count(out); err != nil {
		return nil, err
	}
	return out, nil
}

// newSeries checks StatsSeries's arguments and returns its buckets, empty
// and with their Start set: ErrInvalid when bucket is not positive, when
// the series would be longer than MaxSeriesBuckets, or when [since, until)
// is too long for a time.Duration (its length, and so the bucket count,
// would be wrong); an empty, non-nil series for an empty or inverted
// window.
func newSeries(since, until time.Time, bucket time.Duration) ([]StatsBucket, error) {
	if bucket <= 0 {
		return nil, fmt.Errorf("store: %w: bucket width %s is not positive", ErrInvalid, bucket)
	}
	if !until.After(since) {
		return []StatsBucket{}, nil
	}
	span := until.Sub(since)
	n := int64(span / bucket)
	if span%bucket != 0 {
		n++
	}
	if n > MaxSeriesBuckets || span == math.MaxInt64 {
		return nil, fmt.Errorf("store: %w: %d buckets of %s exceed the maximum of %d", ErrInvalid, n, bucket, MaxSeriesBuckets)
	}
	out := make([]StatsBucket, n)
	for i := range out {
		out[i].Start = since.Add(time.Duration(i) * bucket)
	}
	return out, nil
}
