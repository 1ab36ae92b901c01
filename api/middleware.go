package api

// Middleware that every route passes through: request ids, security headers,
// the access log and metrics, the body limit and panic recovery.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/labstack/echo/v4"
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID takes the client's X-Request-ID when it is a short token, makes
// a random one otherwise, and echoes it on the response.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !requestIDPattern.MatchString(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

// contentSecurityPolicy allows only same-origin resources and no inline
// script or style: the admin page is plain files under /admin/. media-src
// also allows blob: so "Try it" can play back a clip it recorded or picked,
// which exists only in the browser's memory.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// securityHeaders sets the security headers on every response.
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		return next(c)
	}
}

// observe answers errors through the error handler, then records the
// request in the metrics and the access log. The access log holds method,
// route, status and latency: never a query string, header or body.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		status := c.Response().Status
		if st, ok := c.Get(streamedStatusKey).(int); ok {
			// An event stream that ended in an error event.
			status = st
		}
		elapsed := time.Since(start)
		s.metrics.observeRequest(route, c.Request().Method, status, elapsed)
		level := slog.LevelInfo
		if route == "/healthz" || route == "/metrics" {
			level = slog.LevelDebug // polled by monitors
		}
		if quiet, _ := c.Get(quietKey).(bool); quiet {
			level = slog.LevelDebug // refused by a throttle: counted, not logged one by one
		}
		s.reqLogger(c).Log(c.Request().Context(), level, "http request",
			"method", c.Request().Method,
			"route", route,
			"status", status,
			"latency_ms", elapsed.Milliseconds(),
			"bytes_out", c.Response().Size,
		)
		return nil
	}
}

// bodyLimit refuses a declared Content-Length over MaxBodyBytes at once and
// caps the body reader so that a longer chunked body fails with 413 too.
func (s *Server) bodyLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > s.limits.MaxBodyBytes {
			return errorf(CodePayloadTooLarge, "the request body is %d bytes; the limit is %s",
				r.ContentLength, formatBytes(s.limits.MaxBodyBytes))
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, s.limits.MaxBodyBytes)
		return next(c)
	}
}

// recoverPanic turns a panic in a handler into an error (answered as 500
// internal, with the stack in the log) so that the server and the request's
// log entry survive it. http.ErrAbortHandler is re-raised: it means "abort".
func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return callSafely(next, c) }
}

// callSafely calls next, converting a panic into an error.
func callSafely(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return next(c)
}

// reqLogger returns the server's logger with the request id attached.
func (s *Server) reqLogger(c echo.Context) *slog.Logger {
	id := c.Response().Header().Get(echo.HeaderXRequestID)
	return s.log.With("request_id", id)
}
