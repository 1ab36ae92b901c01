package api

// GET /v1/admin/stats: usage, errors, latency and outcomes over a window.

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/store"
)

// percentilesJSON is {p50, p95} in milliseconds; null when there is no value.
type percentilesJSON struct {
	P50 *int64 `json:"p50"`
	P95 *int64 `json:"p95"`
}

func percentilesOf(p store.Percentiles) percentilesJSON {
	if p.N == 0 {
		return percentilesJSON{}
	}
	return percentilesJSON{P50: &p.P50, P95: &p.P95}
}

// outcomeFields are issue 12's outcome counters, used overall and per key.
type outcomeFields struct {
	Outcomes        int             `json:"outcomes"`
	Accepted        int             `json:"accepted"`
	AcceptanceRate  *float64        `json:"acceptance_rate"`
	RankCounts      map[string]int  `json:"rank_counts"`
	NoneFit         int             `json:"none_fit"`
	TimeToChoiceMS  percentilesJSON `json:"time_to_choice_ms"`
	KeystrokesSaved int             `json:"keystrokes_saved"`
}

// rate is accepted/outcomes rounded to 4 decimals; nil when outcomes is 0.
func rate(accepted, outcomes int) *float64 {
	if outcomes == 0 {
		return nil
	}
	r := math.Round(float64(accepted)/float64(outcomes)*1e4) / 1e4
	return &r
}

func outcomeFieldsOf(o store.OutcomeStats) outcomeFields {
	ranks := make(map[string]int, len(o.RankCounts))
	for r, n := range o.RankCounts {
		ranks[strconv.Itoa(r)] = n
	}
	return outcomeFields{
		Outcomes: o.Outcomes, Accepted: o.Accepted, AcceptanceRate: rate(o.Accepted, o.Outcomes),
		RankCounts: ranks, NoneFit: o.NoneFit, TimeToChoiceMS: percentilesOf(o.TimeToChoice),
		KeystrokesSaved: o.KeystrokesSaved,
	}
}

type keyStatsJSON struct {
	APIKeyHash string `json:"api_key_hash"`
	ClientID   string `json:"client_id"`
	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	outcomeFields
}

type versionStatsJSON struct {
	Version        string   `json:"version"`
	Inferences     int      `json:"inferences"`
	Outcomes       int      `json:"outcomes"`
	Accepted       int      `json:"accepted"`
	AcceptanceRate *float64 `json:"acceptance_rate"`
}

// modelStatsJSON is one language model's answers in by_model.
type modelStatsJSON struct {
	Model          string          `json:"model"`
	Inferences     int             `json:"inferences"`
	Outcomes       int             `json:"outcomes"`
	Accepted       int             `json:"accepted"`
	AcceptanceRate *float64        `json:"acceptance_rate"`
	LatencyMS      percentilesJSON `json:"latency_ms"`
}

type statsBucket struct {
	Start         time.Time `json:"start"`
	TotalRequests int       `json:"total_requests"`
	ActiveUsers   int       `json:"active_users"`
	Outcomes      int       `json:"outcomes"`
	Accepted      int       `json:"accepted"`
}

// statsResponse is AdminStatsResponse; everything after active_users is
// additive.
type statsResponse struct {
	Since         time.Time       `json:"since"`
	WindowSeconds int64           `json:"window_seconds"`
	TotalRequests int             `json:"total_requests"`
	ActiveUsers   int             `json:"active_users"`
	Errors        map[string]int  `json:"errors"`
	LatencyMS     percentilesJSON `json:"latency_ms"`
	outcomeFields
	ByKey           []keyStatsJSON     `json:"by_key"`
	ByPromptVersion []versionStatsJSON `json:"by_prompt_version"`
	// ByModel is per language model file that answered, in the order each
	// was first used in the window (a switch of models shows here).
	ByModel []modelStatsJSON `json:"by_model"`
	// KSR is the keystroke saving rate per steering mode and prompt
	// version (steer.go).
	KSR []ksrJSON `json:"ksr"`
	// Series is present (possibly empty) exactly when bucket was given.
	Series *[]statsBucket `json:"series,omitempty"`
}

// handleStats serves GET /v1/admin/stats over the window (see window):
// total_requests counts /v1/infer calls (and admin "Try it" runs) whatever
// their outcome; active_users counts distinct user_id pseudonyms, or keys
// for calls without user_id; errors counts failed calls by error code;
// latency_ms is over answered calls; the outcome fields are over the
// window's inferences that got feedback, also per key (by_key: the keys
// replyd knows, most requests first) and per system-prompt version
// (by_prompt_version, in the order the versions were first used). With
// bucket (a duration), series splits the window; it ends at the same
// instant as the window, so no bucket starts at "now".
func (s *Server) handleStats(c echo.Context) error {
	until := s.now().UTC()
	since, secs, err := s.windowAt(c, until)
	if err != nil {
		return err
	}
	var bucket time.Duration
	if v := c.QueryParam("bucket"); v != "" {
		b, ok := parseDuration(v)
		if !ok || b < time.Minute {
			return badRequest("bucket must be a duration of at least 1m, such as 1h or 1d")
		}
		if n := until.Sub(since) / b; n >= time.Duration(s.limits.MaxSeriesBuckets) {
			return badRequest("bucket is too small for the window: at most %d buckets", s.limits.MaxSeriesBuckets)
		}
		bucket = b
	}
	st, err := s.store.Stats(since, until)
	if err != nil {
		return err
	}
	keys, err := s.store.ListKeys(0, true)
	if err != nil {
		return err
	}
	clients := make(map[string]string, len(keys))
	for _, k := range keys {
		clients[k.Hash] = k.ClientID
	}
	out := statsResponse{
		Since: since, WindowSeconds: secs, TotalRequests: st.TotalRequests, ActiveUsers: st.ActiveUsers,
		Errors: st.Errors, LatencyMS: percentilesOf(st.Latency), outcomeFields: outcomeFieldsOf(st.OutcomeStats),
		ByKey: []keyStatsJSON{}, ByPromptVersion: make([]versionStatsJSON, 0, len(st.ByPromptVersion)),
		ByModel: make([]modelStatsJSON, 0, len(st.ByModel)),
	}
	if out.Errors == nil {
		out.Errors = map[string]int{}
	}
	for _, k := range st.ByKey {
		client, known := clients[k.KeyHash]
		if !known {
			continue // a request with a key replyd never issued
		}
		out.ByKey = append(out.ByKey, keyStatsJSON{
			APIKeyHash: k.KeyHash, ClientID: client, Requests: k.Requests, Errors: k.Errors,
			outcomeFields: outcomeFieldsOf(k.OutcomeStats),
		})
	}
	for _, v := range st.ByPromptVersion {
		out.ByPromptVersion = append(out.ByPromptVersion, versionStatsJSON{
			Version: v.Version, Inferences: v.Inferences, Outcomes: v.Outcomes, Accepted: v.Accepted,
			AcceptanceRate: rate(v.Accepted, v.Outcomes),
		})
	}
	for _, m := range st.ByModel {
		out.ByModel = append(out.ByModel, modelStatsJSON{
			Model: m.Model, Inferences: m.Inferences, Outcomes: m.Outcomes, Accepted: m.Accepted,
			AcceptanceRate: rate(m.Accepted, m.Outcomes), LatencyMS: percentilesOf(m.Latency),
		})
	}
	out.KSR = ksrOfStats(st.KSR)
	if bucket > 0 {
		series, err := s.store.StatsSeries(since, until, bucket)
		if err != nil {
			return err
		}
		list := make([]statsBucket, 0, len(series))
		for _, sb := range series {
			list = append(list, statsBucket{Start: sb.Start.UTC(), TotalRequests: sb.TotalRequests, ActiveUsers: sb.ActiveUsers,
				Outcomes: sb.Outcomes, Accepted: sb.Accepted})
		}
		out.Series = &list
	}
	return c.JSON(http.StatusOK, out)
}
