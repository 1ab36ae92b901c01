package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// adminLog appends one admin-stream log entry. resourceID names what the
// action touched (a key hash, a prompt version, "otp", "session"). A HEAD
// request is logged as nothing: net/http sends none of the body, so no
// export or download took place.
func (s *Server) adminLog(c echo.Context, level, resourceID, format string, args ...any) {
	if c.Request().Method == http.MethodHead {
		return
	}
	if err := s.appendAdminLog(level, resourceID, fmt.Sprintf(format, args...)); err != nil {
		s.reqLogger(c).Error("appending the admin log entry failed", "error", err.Error())
	}
}

// appendAdminLog appends one admin-stream entry, for work that outlives
// its request (a comparison's end) as for adminLog.
func (s *Server) appendAdminLog(level, resourceID, message string) error {
	return s.store.AppendLog(store.LogEntry{
		Timestamp:    s.now(),
		Level:        level,
		Message:      message,
		ResourceType: store.ResourceAdmin,
		ResourceID:   resourceID,
		StreamName:   store.StreamAdmin,
		Node:         s.node,
	})
}
