package main

import (
	"context"
	"time"

	"github.com/replyd/replyd/internal/disk"
	"github.com/replyd/replyd/store"
)

// housekeeping keeps the data file bounded without blocking writers: every
// minute it trims the log to REPLYD_LOG_MAX_MB (oldest first) and deletes
// expired pairing codes (a read when there are none); every ten minutes it
// prunes log entries past their retention, expired sessions and expired
// login codes, all in small transactions, and renews the TLS server
// certificate when due.
func (s *Server) housekeeping(ctx context.Context) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	minute := time.NewTicker(time.Minute)
	defer minute.Stop()
	s.prune(ctx)
	s.trimLog()
	for {
		select {
		case <-ctx.Done():
			return
		case <-minute.C:
			if _, err := s.db.PrunePairings(time.Now()); err != nil {
				s.log.Warn("pruning pairing codes", "err", err)
			}
			s.trimLog()
		case <-t.C:
			s.prune(ctx)
			s.renewCert()
		}
	}
}

// trimLog deletes the oldest log entries while the log takes more than
// REPLYD_LOG_MAX_MB.
func (s *Server) trimLog() {
	if s.cfg.LogMaxMB <= 0 {
		return
	}
	n, err := s.db.PruneLogsToSize(int64(s.cfg.LogMaxMB)*1000*1000, 500)
	if err != nil {
		s.log.Warn("trimming the log to its size bound", "err", err)
	}
	if n > 0 {
		s.log.Info("deleted the oldest log entries to keep the log within its size bound", "count", n, "log_max_mb", s.cfg.LogMaxMB)
	}
}

// warnIfNearlyFull warns at start when the data disk has less free space
// than REPLYD_MIN_FREE_MB.
func (s *Server) warnIfNearlyFull() {
	free, err := disk.Free(s.cfg.DataDir)
	if err == nil && free < int64(s.cfg.MinFreeMB)<<20 {
		s.log.Warn("the data directory's disk is nearly full: writes will fail when it is; free space on it",
			"dir", s.cfg.DataDir, "free_mib", free>>20, "min_free_mb", s.cfg.MinFreeMB)
	}
}

// renewCert replaces the server certificate of REPLYD_TLS=auto when it
// nears its expiry or the box's names or addresses changed.
func (s *Server) renewCert() {
	if s.tls == nil || s.tls.ca == nil {
		return
	}
	if _, err := s.tls.ca.Renew(time.Now()); err != nil {
		s.log.Error("renewing the TLS server certificate failed; the current one stays in use", "err", err, "expires", s.tls.certs.NotAfter().UTC().Format(time.RFC3339))
	}
}

func (s *Server) prune(ctx context.Context) {
	now := time.Now()
	if _, err := s.db.PruneSessions(now); err != nil {
		s.log.Warn("pruning sessions", "err", err)
	}
	if _, err := s.db.PruneOTPs(now); err != nil {
		s.log.Warn("pruning login codes", "err", err)
	}
	if _, err := s.db.PrunePairings(now); err != nil {
		s.log.Warn("pruning pairing codes", "err", err)
	}
	s.pruneMemory(now)
	if s.cfg.LogRetention <= 0 {
		return
	}
	total := 0
	for ctx.Err() == nil {
		n, err := s.db.PruneLogs(now.Add(-s.cfg.LogRetention), 500)
		if err != nil {
			s.log.Warn("pruning logs", "err", err)
			return
		}
		total += n
		if n < 500 {
			break
		}
		time.Sleep(10 * time.Millisecond) // let writers in between batches
	}
	if total > 0 {
		s.log.Info("pruned old log entries", "count", total, "retention", FormatDuration(s.cfg.LogRetention))
	}
}

// memoryPruneTimes are the cut-offs of PruneMemory at now: pairs older than
// the memory retention (never, when it is 0), and the texts that awaited
// feedback once it can no longer come (or at the retention, if shorter).
func memoryPruneTimes(keep time.Duration, now time.Time) (pairsBefore, textsBefore time.Time) {
	textsBefore = now.Add(-(store.FeedbackWindow + store.ReplaceWindow))
	if keep > 0 {
		pairsBefore = now.Add(-keep)
		if pairsBefore.After(textsBefore) {
			textsBefore = pairsBefore
		}
	}
	return pairsBefore, textsBefore
}

// pruneMemory applies the memory retention (see memoryPruneTimes).
func (s *Server) pruneMemory(now time.Time) {
	keep := s.cfg.MemoryKeep()
	p, err := s.db.PruneMemory(memoryPruneTimes(keep, now))
	if err != nil {
		s.log.Warn("pruning remembered replies", "err", err)
		return
	}
	if p != (store.MemoryPrune{}) {
		s.log.Info("pruned remembered replies", "pairs", p.Pairs, "pending_texts", p.Pending, "users", p.Users, "retention", FormatDuration(keep))
	}
}
