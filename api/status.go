package api

// How the box is doing: /healthz (public, for load balancers and the
// conversation page) and /v1/admin/status (the admin page's Status view).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// engineReadiness is one engine's entry in /healthz: no model paths, which
// only the admin status shows.
type engineReadiness struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	Demo  bool   `json:"demo"`
}

type healthResponse struct {
	// Status is ok, degraded (answering, but the store is unreachable:
	// requests that need it get 503 store_unavailable), loading or error.
	Status string `json:"status"`
	// Reason says why the status is not ok, without internals.
	Reason string `json:"reason,omitempty"`
	// Node names this box, so that a load balancer's checks and a person
	// reading them tell the boxes apart.
	Node string `json:"node"`
	// DemoModels is true when a generated random-weight demo model is in
	// use: the service works, but its replies and transcripts are gibberish.
	DemoModels bool              `json:"demo_models"`
	Engines    []engineReadiness `json:"engines"`
	// M4A is true when M4A/AAC uploads (iOS recordings) can be decoded:
	// that needs the ffmpeg executable on the box.
	M4A bool `json:"m4a"`
	// VAD is "on" when voice activity detection runs before speech-to-text,
	// "off" when its model is missing (whole recordings are transcribed);
	// absent when the engines do not report it. It never makes the status
	// anything but "ok".
	VAD     string      `json:"vad,omitempty"`
	Storage storageView `json:"storage"`
}

// handleHealthz serves GET /healthz. Without a credential the answer is
// {"status"} alone; with a valid X-API-KEY or admin credential it carries
// the details below. 200 {"status":"ok"} when every engine
// is ready and the store takes writes; 200 {"status":"degraded","reason":…}
// when the engines are ready but the store cannot be reached (requests that
// need it get 503 store_unavailable until it is back), writes to it fail (a
// full disk: 507), or the data disk is nearly full; a load balancer keeps the
// box, inference still works. 503 {"status":"loading"} with Retry-After while
// an engine is loading; 503 {"status":"error"} when one failed to load.
// engines lists each engine's readiness, storage the store's and the data
// disk's state, node names the box.
func (s *Server) handleHealthz(c echo.Context) error {
	out := healthResponse{Status: "ok", Node: s.node, Engines: []engineReadiness{}, M4A: s.m4aAvailable()}
	if s.health != nil {
		if v, ok := s.health.(VADSource); ok {
			if st := v.VAD(); st.Name != "" {
				out.VAD = "off"
				if st.Ready {
					out.VAD = "on"
				}
			}
		}
		for _, e := range s.health.Engines() {
			out.Engines = append(out.Engines, engineReadiness{Name: e.Name, Ready: e.Ready, Demo: e.Demo})
			out.DemoModels = out.DemoModels || e.Demo
			if !e.Ready {
				if e.Error != "" {
					out.Status, out.Reason = "error", "a model failed to load"
				} else if out.Status == "ok" {
					out.Status, out.Reason = "loading", "the models are loading"
				}
			}
		}
	}
	var degraded bool
	degraded, out.Storage = s.storageState(c)
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Add(echo.HeaderVary, HeaderAPIKey+", "+HeaderAdminKey+", "+HeaderAdminSession)
	status := http.StatusOK
	if out.Status != "ok" {
		if out.Status == "loading" {
			c.Response().Header().Set("Retry-After", fmt.Sprint(retryAfterSeconds(s.limits.NotReadyRetryAfter)))
		}
		status = http.StatusServiceUnavailable
	} else if degraded {
		out.Status, out.Reason = "degraded", out.Storage.Problem
	}
	if !s.healthDetails(c) {
		return c.JSON(status, healthStatusOnly{Status: out.Status})
	}
	return c.JSON(status, out)
}

// healthStatusOnly is /healthz for a caller without a credential: a load
// balancer or systemd needs the status and nothing else (no node name, no
// demo flag, no disk figures).
type healthStatusOnly struct {
	Status string `json:"status"`
}

// healthDetails reports whether /healthz may show its details: the request
// carries a valid, active X-API-KEY or a valid admin credential. An invalid
// credential counts as a failed authentication of the address, as anywhere
// else (so /healthz is no free oracle for guessing keys), and gets the
// anonymous answer.
func (s *Server) healthDetails(c echo.Context) bool {
	h := c.Request().Header
	if h.Get(HeaderAdminKey) != "" || h.Get(HeaderAdminSession) != "" {
		if s.adminCredential(c) == nil {
			return true
		}
	}
	if h.Get(HeaderAPIKey) != "" {
		_, _, err := s.apiKey(c)
		return err == nil
	}
	return false
}

// storeHealth pings the store (bounded by healthPingTimeout) and returns ""
// when it answers and takes writes, else a reason fit for the public
// /healthz. The real error is logged when the store goes down and again when
// it is back, not on every check.
func (s *Server) storeHealth(c echo.Context) string {
	ctx, cancel := context.WithTimeout(c.Request().Context(), healthPingTimeout)
	defer cancel()
	err := s.store.Ping(ctx)
	if err == nil {
		if s.storeDown.Swap(false) {
			s.log.Info("the store answers again", "store", s.dataFile)
		}
		return ""
	}
	if !s.storeDown.Swap(true) {
		s.log.Error("the store does not answer or take writes: requests that need it fail", "store", s.dataFile, "error", err.Error())
	}
	switch {
	case errors.Is(err, store.ErrNoSpace):
		return "writes fail: the data disk is full"
	case errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		return "the store (database) cannot be reached"
	}
	return "the store failed its health check"
}

// healthPingTimeout bounds the store check of one /healthz.
const healthPingTimeout = 2 * time.Second

// statusResponse is GET /v1/admin/status, the admin page's overview.
type statusResponse struct {
	// Status is "ok", or "degraded" when storage is (see Storage).
	Status        string                `json:"status"`
	Storage       storageView           `json:"storage"`
	Version       string                `json:"version"`
	Node          string                `json:"node"`
	UptimeSeconds int64                 `json:"uptime_seconds"`
	Engines       []engine.EngineStatus `json:"engines"`
	// VAD is voice activity detection's state: ready, or an error saying
	// why it is off. Absent when not reported.
	VAD           *engine.EngineStatus `json:"vad,omitempty"`
	QueueDepth    int                  `json:"queue_depth"`
	DataFile      string               `json:"data_file"`
	DataFileBytes int64                `json:"data_file_bytes"`
	OTPChannel    string               `json:"otp_channel"`
	TOTPEnrolled  bool                 `json:"totp_enrolled"`
	TLS           bool                 `json:"tls"`
	// TLSCAFingerprint is the SHA-256 fingerprint of replyd's own
	// certificate authority (REPLYD_TLS=auto), "" otherwise.
	TLSCAFingerprint string `json:"tls_ca_fingerprint"`
	// M4A tells whether M4A/AAC uploads can be decoded (ffmpeg installed).
	M4A bool `json:"m4a"`
	// CORSOrigins are the origins allowed to call the tablet routes.
	CORSOrigins []string `json:"cors_origins"`
	// Live is live listening on this box (liveState): "on", "off"
	// (REPLYD_LIVE=off) or "no_vad" (no voice detection model: sessions
	// are refused until it loads).
	Live   string     `json:"live"`
	Limits limitsView `json:"limits"`
	// Kernels names the engines' kernels and CPU the cores replyd plans
	// with (platform.go); absent when not reported.
	Kernels *KernelsView `json:"kernels,omitempty"`
	CPU     *CPUView     `json:"cpu,omitempty"`
}

// limitsView shows the enforced limits on the admin page.
type limitsView struct {
	MaxBodyBytes      int64 `json:"max_body_bytes"`
	MaxPayloadBytes   int64 `json:"max_payload_bytes"`
	MaxAudioSeconds   int64 `json:"max_audio_seconds"`
	MaxMessages       int   `json:"max_messages"`
	MaxContentChars   int   `json:"max_content_chars"`
	MaxCandidates     int   `json:"max_candidates"`
	DefaultCandidates int   `json:"default_candidates"`
	InferTimeoutSecs  int64 `json:"infer_timeout_seconds"`
	SessionTTLSeconds int64 `json:"session_ttl_seconds"`
}

// handleStatus serves GET /v1/admin/status.
func (s *Server) handleStatus(c echo.Context) error {
	size, err := s.store.Size()
	if err != nil {
		return err
	}
	out := statusResponse{
		Version:       s.version,
		Node:          s.node,
		UptimeSeconds: s.uptime(),
		Engines:       []engine.EngineStatus{},
		DataFile:      s.dataFile,
		DataFileBytes: size,
		TLS:           s.tls,
		M4A:           s.m4aAvailable(),
		CORSOrigins:   append([]string{}, s.corsOrigins...),
		Live:          s.liveState(),
		Limits: limitsView{
			MaxBodyBytes:      s.limits.MaxBodyBytes,
			MaxPayloadBytes:   s.limits.MaxPayloadBytes,
			MaxAudioSeconds:   int64(s.limits.MaxAudio / time.Second),
			MaxMessages:       s.limits.MaxMessages,
			MaxContentChars:   s.limits.MaxContentChars,
			MaxCandidates:     s.limits.MaxCandidates,
			DefaultCandidates: s.limits.DefaultCandidates,
			InferTimeoutSecs:  int64(s.limits.InferTimeout / time.Second),
			SessionTTLSeconds: int64(s.limits.SessionTTL / time.Second),
		},
	}
	if s.certs != nil {
		out.TLSCAFingerprint = s.certs.CAFingerprint()
	}
	if s.platform != nil {
		out.Kernels, out.CPU = &s.platform.Kernels, &s.platform.CPU
	}
	if s.health != nil {
		out.Engines = append(out.Engines, s.health.Engines()...)
		out.QueueDepth = s.health.QueueDepth()
		if v, ok := s.health.(VADSource); ok {
			if st := v.VAD(); st.Name != "" {
				out.VAD = &st
			}
		}
	}
	if s.notifier != nil {
		out.OTPChannel = s.notifier.Channel()
	}
	if s.totpOnly {
		out.OTPChannel = ChannelTOTP
	}
	if _, enrolled, err := s.store.Secret(store.SecretTOTP); err == nil {
		out.TOTPEnrolled = enrolled
	}
	var degraded bool
	degraded, out.Storage = s.storageState(c)
	out.Status = "ok"
	if degraded {
		out.Status = "degraded"
	}
	return c.JSON(http.StatusOK, out)
}

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
