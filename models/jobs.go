package models

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrCompareRunning: a comparison is running; one runs at a time
// (CompareRunningError says of which file).
var ErrCompareRunning = errors.New("a comparison is running")

// CompareRunningError names the file being compared.
type CompareRunningError struct{ File string }

func (e *CompareRunningError) Error() string {
	return fmt.Sprintf("a comparison of %s is running; one runs at a time: retry when it has finished", e.File)
}

func (e *CompareRunningError) Unwrap() error { return ErrCompareRunning }

// ReserveCompare reserves the one comparison of this box for the file
// name while its turns are read: a *CompareRunningError when one runs.
// release gives the reservation back unless StartCompare took it over.
func (s *Service) ReserveCompare(name string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs.running != "" {
		return nil, &CompareRunningError{File: s.jobs.running}
	}
	s.jobs.running = name
	return func() {
		s.mu.Lock()
		if s.jobs.running == name && (s.jobs.cancel == nil) {
			s.jobs.running = ""
		}
		s.mu.Unlock()
	}, nil
}

// StartCompare registers c, reserved by ReserveCompare, as running with
// cancel stopping it; done must be called when its run has returned.
func (s *Service) StartCompare(c Comparison, cancel context.CancelFunc) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs.byName == nil {
		s.jobs.byName = map[string]*Comparison{}
	}
	s.jobs.byName[c.Model] = &c
	s.jobs.running, s.jobs.cancel = c.Model, cancel
	s.jobs.wg.Add(1)
	return s.jobs.wg.Done
}

// CompareProgress records done of total replays of the comparison of name.
func (s *Service) CompareProgress(name string, done, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.jobs.byName[name]; ok {
		c.Done, c.Total = done, total
	}
}

// StoreComparison stores the finished comparison c of the file name (of
// st when it began) as this box's record of the file; EndCompare then
// shows it, so that whoever sees the end finds it stored.
func (s *Service) StoreComparison(name string, st os.FileInfo, c Comparison) error {
	return s.putComparison(name, st, c)
}

// EndCompare makes c the comparison of name and ends the running one.
func (s *Service) EndCompare(name string, c Comparison) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.jobs.byName[name]; ok {
		*cur = c
	}
	s.jobs.running, s.jobs.cancel = "", nil
}

// StopCompares cancels the running comparison and waits for it.
func (s *Service) StopCompares() {
	s.mu.Lock()
	if s.jobs.cancel != nil {
		s.jobs.cancel()
	}
	s.mu.Unlock()
	s.jobs.wg.Wait()
}

// Comparison is the latest comparison of the file name: this run's, else
// the one stored of the file as it is now; false when none.
func (s *Service) Comparison(name string) (Comparison, bool, error) {
	s.mu.Lock()
	c, ok := s.jobs.byName[name]
	var cc Comparison
	if ok {
		cc = *c
	}
	s.mu.Unlock()
	if ok {
		return cc, true, nil
	}
	st, err := os.Stat(filepath.Join(s.dir, name))
	if err != nil {
		return Comparison{}, false, nil
	}
	recs, err := s.records(func(n string) os.FileInfo {
		if n == name {
			return st
		}
		return nil
	})
	if err != nil {
		return Comparison{}, false, err
	}
	if c, ok := recs.comparisons[name]; ok {
		return *c, true, nil
	}
	return Comparison{}, false, nil
}

// comparisons returns copies of this run's comparisons, by file name.
func (s *Service) comparisons() map[string]*Comparison {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*Comparison, len(s.jobs.byName))
	for n, c := range s.jobs.byName {
		cc := *c
		out[n] = &cc
	}
	return out
}
