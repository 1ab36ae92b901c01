package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// logEntry is AdminLogEntry; status, latency_ms, client_id and node are
// additive; status and latency_ms are omitted for admin actions; client_id is
// present when resource_id is the hash of an API key (the key's ClientID,
// possibly "").
type logEntry struct {
	Timestamp    time.Time `json:"timestamp"`
	Level        string    `json:"level"`
	Message      string    `json:"message"`
	ResourceType string    `json:"resource_type"`
	ResourceID   string    `json:"resource_id"`
	ClientID     *string   `json:"client_id,omitempty"`
	StreamName   string    `json:"stream_name"`
	Status       int       `json:"status,omitempty"`
	LatencyMS    int64     `json:"latency_ms,omitempty"`
	// Node is the replyd box that wrote the entry ("" for entries written
	// before boxes had names).
	Node string `json:"node"`
	// Model and SpeechModel name the model files that made an answer
	// (omitted when unknown and for other entries).
	Model       string `json:"model,omitempty"`
	SpeechModel string `json:"speech_model,omitempty"`
}

type logsResponse struct {
	Items         []logEntry `json:"items"`
	Count         int        `json:"count"`
	Since         time.Time  `json:"since"`
	WindowSeconds int64      `json:"window_seconds"`
}

// parseDuration accepts a Go duration ("15m", "1h30m", "24h") or a whole
// number of days or weeks ("7d", "2w").
func parseDuration(v string) (time.Duration, bool) {
	if n := len(v); n >= 2 && (v[n-1] == 'd' || v[n-1] == 'w') {
		k, err := strconv.Atoi(v[:n-1])
		if err != nil || k < 0 || k > 100000 {
			return 0, false
		}
		unit := 24 * time.Hour
		if v[n-1] == 'w' {
			unit *= 7
		}
		return time.Duration(k) * unit, true
	}
	d, err := time.ParseDuration(v)
	return d, err == nil
}

// window resolves the since and window query parameters: since (RFC 3339)
// wins over window; window is a duration between 1 s and MaxWindow;
// DefaultWindow when both are absent. It returns the start and the window
// length in whole seconds. A since in the future is a window of 0 seconds
// that holds nothing (tablets' and boxes' clocks disagree): not an error.
func (s *Server) window(c echo.Context) (time.Time, int64, error) {
	return s.windowAt(c, s.now().UTC())
}

// windowAt is window ending at now: callers that count up to "now" pass the
// same instant as their end, so that a series has no bucket starting at
// the end.
func (s *Server) windowAt(c echo.Context, now time.Time) (time.Time, int64, error) {
	if v := c.QueryParam("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return time.Time{}, 0, badRequest("since must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
		}
		if t.After(now) {
			return t.UTC(), 0, nil
		}
		return t.UTC(), int64(now.Sub(t) / time.Second), nil
	}
	w := s.limits.DefaultWindow
	if v := c.QueryParam("window"); v != "" {
		d, ok := parseDuration(v)
		if !ok || d < time.Second || d > s.limits.MaxWindow {
			return time.Time{}, 0, badRequest("window must be a duration such as 15m, 24h or 7d, between 1s and %s", formatDays(s.limits.MaxWindow))
		}
		w = d
	}
	return now.Add(-w), int64(w / time.Second), nil
}

// formatDays renders a whole number of days as "Nd", anything else as a Go
// duration.
func formatDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

var (
	logLevels  = []string{store.LevelInfo, store.LevelWarn, store.LevelError}
	logStreams = []string{store.StreamInfer, store.StreamAdmin, store.StreamAuth, store.StreamSteer}
)

func oneOf(v string, allowed []string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// handleLogs serves GET /v1/admin/logs: newest first, limit DefaultListLimit
// (1..MaxListLimit), the window rules of window(), optional level and stream
// filters.
func (s *Server) handleLogs(c echo.Context) error {
	limit, err := s.listLimit(c)
	if err != nil {
		return err
	}
	since, secs, err := s.window(c)
	if err != nil {
		return err
	}
	level, stream := c.QueryParam("level"), c.QueryParam("stream")
	if level != "" && !oneOf(level, logLevels) {
		return badRequest("level must be one of %s", strings.Join(logLevels, ", "))
	}
	if stream != "" && !oneOf(stream, logStreams) {
		return badRequest("stream must be one of %s", strings.Join(logStreams, ", "))
	}
	entries, err := s.store.Logs(store.LogQuery{Since: since, Limit: limit, Level: level, Stream: stream})
	if err != nil {
		return err
	}
	out := logsResponse{Items: make([]logEntry, 0, len(entries)), Since: since, WindowSeconds: secs}
	clients, err := s.clientIDs(entries)
	if err != nil {
		return err
	}
	for _, e := range entries {
		var model, speech string
		if e.Inference != nil {
			model, speech = e.Inference.Model, e.Inference.SpeechModel
		}
		out.Items = append(out.Items, logEntry{
			Timestamp:    e.Timestamp.UTC(),
			Level:        e.Level,
			Message:      e.Message,
			ResourceType: e.ResourceType,
			ResourceID:   e.ResourceID,
			ClientID:     clients[e.ResourceID],
			StreamName:   e.StreamName,
			Status:       e.Status,
			LatencyMS:    e.LatencyMS,
			Node:         e.Node,
			Model:        model,
			SpeechModel:  speech,
		})
	}
	out.Count = len(out.Items)
	return c.JSON(http.StatusOK, out)
}

// clientIDs looks up the ClientID of every API key the entries name by hash
// (one store read per distinct key). Keys are never deleted, so each hash a
// log entry names resolves; a hash that does not is left without client_id.
func (s *Server) clientIDs(entries []store.LogEntry) (map[string]*string, error) {
	out := map[string]*string{}
	seen := map[string]bool{}
	for _, e := range entries {
		h := e.ResourceID
		if seen[h] || !isKeyHash(h) {
			continue
		}
		seen[h] = true
		k, err := s.store.GetKey(h)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		id := k.ClientID
		out[h] = &id
	}
	return out, nil
}
