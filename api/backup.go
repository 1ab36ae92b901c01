package api

// GET /v1/admin/backup: the data file, copied while replyd runs.

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// handleBackup serves GET /v1/admin/backup: a hot, consistent copy of the
// data file as an attachment. Once the first bytes are sent, a failure can
// only be logged (the error handler sees a committed response) and the
// client sees a truncated download.
func (s *Server) handleBackup(c echo.Context) error {
	name := fmt.Sprintf("replyd-backup-%s.db", s.now().UTC().Format("20060102T150405Z"))
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/octet-stream")
	h.Set(echo.HeaderContentDisposition, fmt.Sprintf("attachment; filename=%q", name))
	h.Set("Cache-Control", "no-store")
	if c.Request().Method == http.MethodHead {
		return c.NoContent(http.StatusOK) // no copy made, none logged
	}
	// The first Write commits status 200; a failure before it is answered
	// as a normal error.
	n, err := s.store.Backup(c.Response())
	if errors.Is(err, store.ErrNotSupported) {
		return &Error{Code: CodeNotSupported, Message: "this replyd keeps its data in PostgreSQL, which is backed up with pg_dump, not downloaded here (see the README: two boxes, one PostgreSQL)", Err: err}
	}
	if err != nil {
		return fmt.Errorf("backup after %d bytes: %w", n, err)
	}
	s.adminLog(c, store.LevelInfo, "backup", "backup downloaded: %d bytes", n)
	return nil
}
