package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/internal/secret"
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
	e := store.LogEntry{
		Timestamp:    s.now(),
		Level:        level,
		Message:      fmt.Sprintf(format, args...),
		ResourceType: store.ResourceAdmin,
		ResourceID:   resourceID,
		StreamName:   store.StreamAdmin,
		Node:         s.node,
	}
	if err := s.store.AppendLog(e); err != nil {
		s.reqLogger(c).Error("appending the admin log entry failed", "error", err.Error())
	}
}

// readJSON decodes the request's JSON body into dst. An empty body leaves
// dst unchanged when allowEmpty. Unknown fields are ignored. The body is
// bounded by MaxJSONBodyBytes.
func (s *Server) readJSON(c echo.Context, dst any, allowEmpty bool) error {
	data, err := io.ReadAll(io.LimitReader(c.Request().Body, s.limits.MaxJSONBodyBytes+1))
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) {
			return ae // cut for arriving too slowly
		}
		return &Error{Code: CodeInvalidRequest, Message: "the request body could not be read", Err: err}
	}
	if int64(len(data)) > s.limits.MaxJSONBodyBytes {
		return errorf(CodePayloadTooLarge, "the request body exceeds the limit of %s", formatBytes(s.limits.MaxJSONBodyBytes))
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("a JSON request body is required")
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return jsonError("the request body", err)
	}
	return nil
}

// handleLogout serves DELETE /v1/admin/session: it ends the session named by
// X-ADMIN-SESSION. It is idempotent within the session's own authentication:
// once deleted, the token is refused with 401 like any invalid one.
func (s *Server) handleLogout(c echo.Context) error {
	token := c.Request().Header.Get(HeaderAdminSession)
	if token == "" {
		return badRequest("%s is required to log out (an admin key has no session)", HeaderAdminSession)
	}
	if err := s.store.DeleteSession(secret.Hash(token)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.adminLog(c, store.LevelInfo, "session", "logout")
	return c.JSON(http.StatusOK, map[string]bool{"logged_out": true})
}
