// Package api serves replyd's HTTP interface (shared/spec/interface.md) with
// Echo: the inference endpoint, the admin endpoints, the health check, the
// integration guide, the OpenAPI file, the embedded admin page and the
// Prometheus metrics. It compiles no C: the engines come in through the
// Inferer and HealthSource interfaces and the state through Store.
package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits are the bounds the API enforces. The integration guide and the
// OpenAPI file are rendered from the same values, so what they say is what
// the server does.
type Limits struct {
	// MaxBodyBytes bounds the whole /v1/infer (and /v1/admin/try) request body.
	MaxBodyBytes int64
	// MaxPayloadBytes bounds the payload JSON part.
	MaxPayloadBytes int64
	// MaxJSONBodyBytes bounds the JSON body of admin requests.
	MaxJSONBodyBytes int64
	// MaxAudio is the longest decoded recording; the engine enforces it while
	// decoding and the guide documents it.
	MaxAudio time.Duration
	// MaxMessages bounds the number of dialog messages.
	MaxMessages int
	// MaxContentChars bounds one message's content, in Unicode code points.
	MaxContentChars int
	// MaxProfileChars bounds disabled_person_biography, persona and
	// user_profile, each in code points.
	MaxProfileChars int
	// MaxIDChars bounds user_id, dialog_id, step_id and language.
	MaxIDChars int
	// MaxCandidates is the largest accepted options.max_candidates;
	// DefaultCandidates is used when it is omitted.
	MaxCandidates     int
	DefaultCandidates int
	// DefaultTemperature is used when options.temperature is omitted; the
	// accepted range is 0 to MaxTemperature.
	DefaultTemperature float64
	MaxTemperature     float64
	// InferTimeout is the deadline of one inference, queueing included.
	InferTimeout time.Duration
	// SessionTTL is the lifetime of an admin session.
	SessionTTL time.Duration
	// OTPTTL is the lifetime of a one-time code; OTPResendInterval the least
	// time between two sends; OTPMaxAttempts the wrong tries that burn a code.
	OTPTTL            time.Duration
	OTPResendInterval time.Duration
	OTPMaxAttempts    int
	// DefaultRateLimit is a new key's rate_limit_per_minute when the create
	// request omits it; MaxRateLimit is the largest accepted value.
	DefaultRateLimit int
	MaxRateLimit     int
	// DefaultListLimit and MaxListLimit bound the limit query parameter of
	// the key, log and prompt-history lists.
	DefaultListLimit int
	MaxListLimit     int
	// DefaultWindow is the logs and stats window when neither window nor
	// since is given; MaxWindow the longest accepted; MaxSeriesBuckets the
	// most buckets a stats series may have.
	DefaultWindow    time.Duration
	MaxWindow        time.Duration
	MaxSeriesBuckets int
	// MaxPromptChars bounds the system prompt, in code points.
	MaxPromptChars int
	// OverloadedRetryAfter and NotReadyRetryAfter are the Retry-After values
	// of 503 overloaded and 503 not_ready.
	OverloadedRetryAfter time.Duration
	NotReadyRetryAfter   time.Duration
}

// DefaultLimits returns the limits replyd ships with.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:         25 << 20,
		MaxPayloadBytes:      1 << 20,
		MaxJSONBodyBytes:     1 << 20,
		MaxAudio:             120 * time.Second,
		MaxMessages:          200,
		MaxContentChars:      4000,
		MaxProfileChars:      8000,
		MaxIDChars:           200,
		MaxCandidates:        8,
		DefaultCandidates:    3,
		DefaultTemperature:   0.7,
		MaxTemperature:       2,
		InferTimeout:         30 * time.Second,
		SessionTTL:           12 * time.Hour,
		OTPTTL:               5 * time.Minute,
		OTPResendInterval:    30 * time.Second,
		OTPMaxAttempts:       5,
		DefaultRateLimit:     60,
		MaxRateLimit:         100000,
		DefaultListLimit:     100,
		MaxListLimit:         1000,
		DefaultWindow:        24 * time.Hour,
		MaxWindow:            366 * 24 * time.Hour,
		MaxSeriesBuckets:     1000,
		MaxPromptChars:       32000,
		OverloadedRetryAfter: 2 * time.Second,
		NotReadyRetryAfter:   5 * time.Second,
	}
}

// withDefaults fills every zero field of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set64 := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	set64(&l.MaxBodyBytes, d.MaxBodyBytes)
	set64(&l.MaxPayloadBytes, d.MaxPayloadBytes)
	set64(&l.MaxJSONBodyBytes, d.MaxJSONBodyBytes)
	setDur(&l.MaxAudio, d.MaxAudio)
	setInt(&l.MaxMessages, d.MaxMessages)
	setInt(&l.MaxContentChars, d.MaxContentChars)
	setInt(&l.MaxProfileChars, d.MaxProfileChars)
	setInt(&l.MaxIDChars, d.MaxIDChars)
	setInt(&l.MaxCandidates, d.MaxCandidates)
	setInt(&l.DefaultCandidates, d.DefaultCandidates)
	if l.DefaultCandidates > l.MaxCandidates {
		l.DefaultCandidates = l.MaxCandidates
	}
	setF(&l.MaxTemperature, d.MaxTemperature)
	if l.DefaultTemperature <= 0 || l.DefaultTemperature > l.MaxTemperature {
		l.DefaultTemperature = d.DefaultTemperature
	}
	setDur(&l.InferTimeout, d.InferTimeout)
	setDur(&l.SessionTTL, d.SessionTTL)
	setDur(&l.OTPTTL, d.OTPTTL)
	setDur(&l.OTPResendInterval, d.OTPResendInterval)
	setInt(&l.OTPMaxAttempts, d.OTPMaxAttempts)
	setInt(&l.DefaultRateLimit, d.DefaultRateLimit)
	setInt(&l.MaxRateLimit, d.MaxRateLimit)
	setInt(&l.DefaultListLimit, d.DefaultListLimit)
	setInt(&l.MaxListLimit, d.MaxListLimit)
	setDur(&l.DefaultWindow, d.DefaultWindow)
	setDur(&l.MaxWindow, d.MaxWindow)
	setInt(&l.MaxSeriesBuckets, d.MaxSeriesBuckets)
	setInt(&l.MaxPromptChars, d.MaxPromptChars)
	setDur(&l.OverloadedRetryAfter, d.OverloadedRetryAfter)
	setDur(&l.NotReadyRetryAfter, d.NotReadyRetryAfter)
	return l
}

// Options configure a Server. Store and Inferer are required; the others
// have working defaults (Notifier nil makes OTP send answer 502, Health nil
// reports the engines as ready).
type Options struct {
	Store    Store
	Inferer  Inferer
	Notifier Notifier
	Health   HealthSource
	// Logger receives the access log and errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Version is reported by /v1/admin/status.
	Version string
	// Limits are the enforced bounds; zero fields take DefaultLimits.
	Limits Limits
	// MetricsPublic leaves /metrics off the main router: cmd then serves
	// MetricsHandler on a separate listener. When false, GET /metrics is on
	// the main router behind admin authentication.
	MetricsPublic bool
	// TLS tells /v1/admin/status whether the listener uses TLS.
	TLS bool
	// DataFile is the path of the store's file, shown on the admin page.
	DataFile string
}

// Server is replyd's HTTP API. Create it with New; it is safe for
// concurrent use.
type Server struct {
	e        *echo.Echo
	store    Store
	inferer  Inferer
	notifier Notifier
	health   HealthSource
	log      *slog.Logger
	now      func() time.Time
	version  string
	limits   Limits
	tls      bool
	dataFile string
	started  time.Time

	limiter *rateLimiter
	otpMu   sync.Mutex // serialises OTP sends
	metrics *metrics
	reg     *prometheus.Registry

	clientMD    []byte
	openAPIYAML []byte
	static      *staticFiles
}

// New builds a Server and its routes. It panics when Store or Inferer is nil
// or when the embedded documents fail to render, both programming errors.
func New(o Options) *Server {
	if o.Store == nil || o.Inferer == nil {
		panic("api.New: Store and Inferer are required")
	}
	s := &Server{
		store:    o.Store,
		inferer:  o.Inferer,
		notifier: o.Notifier,
		health:   o.Health,
		log:      o.Logger,
		now:      o.Now,
		version:  o.Version,
		limits:   o.Limits.withDefaults(),
		tls:      o.TLS,
		dataFile: o.DataFile,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.version == "" {
		s.version = "dev"
	}
	s.started = s.now()
	s.limiter = newRateLimiter()
	s.reg = prometheus.NewRegistry()
	s.metrics = newMetrics(s.reg, s.health)

	var err error
	if s.clientMD, err = renderDoc("client.md", clientMDTemplate, s.docData()); err != nil {
		panic(err)
	}
	if s.openAPIYAML, err = renderDoc("openapi.yaml", openAPITemplate, s.docData()); err != nil {
		panic(err)
	}
	if s.static, err = newStaticFiles(); err != nil {
		panic(err)
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.requestID, s.securityHeaders, s.observe, s.recoverPanic)
	s.routes(e, o.MetricsPublic)
	s.e = e
	return s
}

// routes registers every route. The OpenAPI test walks e.Routes() and checks
// that each one is documented.
func (s *Server) routes(e *echo.Echo, metricsPublic bool) {
	e.GET("/healthz", s.handleHealthz)
	e.GET("/client.md", s.handleClientMD)
	e.GET("/openapi.yaml", s.handleOpenAPI)
	e.GET("/", s.handleRoot)
	e.GET("/admin", s.handleRoot)
	e.GET("/admin/*", s.handleAdminPage)

	e.POST("/v1/infer", s.handleInfer, s.inferLog, s.bodyLimit)

	// OTP send and verify are how an administrator logs in: no credential.
	e.POST("/v1/admin/otp/send", s.handleOTPSend)
	e.POST("/v1/admin/otp/verify", s.handleOTPVerify)

	a := e.Group("/v1/admin", s.adminAuth)
	a.DELETE("/session", s.handleLogout)
	a.GET("/status", s.handleStatus)
	a.GET("/stats", s.handleStats)
	a.GET("/logs", s.handleLogs)
	a.GET("/keys", s.handleListKeys)
	a.POST("/keys", s.handleCreateKey)
	a.DELETE("/keys/:api_key_hash", s.handleRevokeKey)
	a.GET("/system-prompt", s.handleGetPrompt)
	a.POST("/system-prompt", s.handleSetPrompt)
	a.GET("/system-prompt/history", s.handlePromptHistory)
	a.GET("/backup", s.handleBackup)
	a.POST("/try", s.handleTry, s.inferLog, s.bodyLimit)

	if !metricsPublic {
		e.GET("/metrics", echo.WrapHandler(s.MetricsHandler()), s.adminAuth)
	}
}

// Handler returns the http.Handler serving every route (the Echo instance).
func (s *Server) Handler() http.Handler { return s.e }

// HTTPServer returns an *http.Server for addr serving Handler with timeouts
// suited to uploads from tablets on a clinic LAN: headers within 10 s and at
// most 64 KiB of them, the whole request within 2 minutes, the answer within
// the inference timeout plus a minute.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2*time.Minute + s.limits.InferTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Limits returns the limits the server enforces, defaults filled in.
func (s *Server) Limits() Limits { return s.limits }

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
		elapsed := time.Since(start)
		s.metrics.observeRequest(route, c.Request().Method, status, elapsed)
		level := slog.LevelInfo
		if route == "/healthz" || route == "/metrics" {
			level = slog.LevelDebug // polled by monitors
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

// uptime returns whole seconds since New.
func (s *Server) uptime() int64 {
	return int64(s.now().Sub(s.started) / time.Second)
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
