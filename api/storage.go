package api

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"
)

// storageView is the state of the data directory in /healthz and
// /v1/admin/status.
type storageView struct {
	// Writable is false while the store cannot take writes: its last write
	// failed (bbolt), or it cannot be reached (PostgreSQL).
	Writable bool `json:"writable"`
	// FreeBytes is the free space of the data directory's file system;
	// absent when unknown.
	FreeBytes *int64 `json:"free_bytes,omitempty"`
	// Problem says, in words for the admin, why storage is degraded.
	Problem string `json:"problem,omitempty"`
}

// storageState reports whether storage is degraded (storeHealth finds the
// store unreachable or its writes failing, or free space is under
// Limits.MinFreeBytes) and describes it.
func (s *Server) storageState(c echo.Context) (bool, storageView) {
	v := storageView{Writable: true}
	var problems []string
	if reason := s.storeHealth(c); reason != "" {
		v.Writable = false
		problems = append(problems, reason)
	}
	if s.diskFree != nil {
		if free, err := s.diskFree(); err == nil {
			v.FreeBytes = &free
			if free < s.limits.MinFreeBytes {
				problems = append(problems, fmt.Sprintf("only %s free on the data disk (warning below %s)", formatSize(free), formatSize(s.limits.MinFreeBytes)))
			}
		}
	}
	v.Problem = strings.Join(problems, "; ")
	return len(problems) > 0, v
}

// formatSize renders a byte count in MiB (or KiB, or bytes) with one
// decimal where it helps.
func formatSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
