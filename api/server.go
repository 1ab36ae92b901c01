// Package api serves replyd's HTTP interface (shared/spec/interface.md) with
// Echo: the inference endpoint, the admin endpoints, the health check, the
// integration guide, the OpenAPI file, the embedded admin page and the
// Prometheus metrics. It compiles no C: the engines come in through the
// Inferer and HealthSource interfaces and the state through Store.
package api

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replyd/replyd/api/web"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

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
	// DataFile names where the data lives on the admin page; empty means
	// the store's Describe (a file path, or a database URL without its
	// password).
	DataFile string
	// PublicURL is the base URL tablets reach replyd at (e.g.
	// https://replyd.local:8080); pairing links are made under it. Empty:
	// from the request's Host and this server's scheme.
	PublicURL string
	// CORSOrigins are the exact origins (ParseCORSOrigins) whose pages may
	// call /v1/infer, /v1/pair and /v1/feedback; none when empty.
	CORSOrigins []string
	// Certs is replyd's own certificate authority and server certificate;
	// nil when TLS is off.
	Certs CertSource
	// M4A reports whether M4A/AAC uploads can be decoded now (ffmpeg is
	// installed); nil means they cannot.
	M4A func() bool
	// Rand is the source of inference ids; nil means crypto/rand.
	Rand io.Reader
	// Node names this box in the log entries it writes and in /healthz and
	// /v1/admin/status (REPLYD_NODE_NAME; cmd defaults it to the hostname).
	Node string
	// TrustedProxies are the peers whose X-Forwarded-For is believed (see
	// ClientAddr); nil trusts none.
	TrustedProxies []*net.IPNet
	// DiskFree reports the free bytes of the data directory's file system
	// for /healthz and the Status view; nil leaves them unknown.
	DiskFree func() (int64, error)
	// TOTPOnly is REPLYD_OTP_CHANNEL=totp: nothing is sent; the admin logs
	// in with an authenticator app's code (POST /v1/admin/totp/enroll).
	TOTPOnly bool
	// Live listening (live.go): Voice detects speech in live audio (nil:
	// live sessions are refused with 503 not_ready); Turn decides when a
	// turn ends; LiveOff switches live listening off for the box
	// (REPLYD_LIVE=off); Sched gives voice detection its priority (nil: no
	// budget).
	Voice   engine.VoiceDetector
	Turn    engine.TurnConfig
	LiveOff bool
	Sched   *engine.Scheduler
	// Models is the models feature (models.go): the models folder, where
	// /v1/admin/models lists, takes and removes model files, and the
	// switch, timing and comparison of the engines' models (each answers
	// 501 not_supported when the Service cannot run it). Nil, or a Service
	// without a folder, answers those routes 501 not_supported.
	Models *models.Service
	// Platform is the engines' kernels and the CPU budget for the Status
	// view; nil leaves them out of /v1/admin/status.
	Platform *Platform
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
	diskFree func() (int64, error)
	node     string
	started  time.Time
	platform *Platform

	publicURL   string
	corsOrigins []string
	certs       CertSource
	m4a         func() bool

	storeDown atomic.Bool // the last health check found the store unreachable

	pairAddrs store.MemoryLimiter // the pairing throttle per client address, this box's own
	refusals  refusalLog          // rate-limit refusals logged, one a window per key
	recent    *recentInferences
	flights   *dialogFlights // the inference in flight per key and dialog_id
	rand      io.Reader
	otpMu     sync.Mutex // serialises OTP sends
	otp       *otpGuard
	totpOnly  bool

	failures  *authFailures
	failMu    sync.Mutex
	failTimer *time.Timer // logs the failure windows once they close
	closed    bool

	adminKey verifiedAdminKey
	kdfSlot  chan struct{} // one admin-key KDF at a time

	trusted  []*net.IPNet
	uploads  *uploadBudget
	inflight *keyInflight

	pseudoMu  sync.Mutex
	pseudoKey []byte // the installation's pseudonym key, read once
	metrics   *metrics
	reg       *prometheus.Registry

	clientMD    []byte
	openAPIYAML []byte
	static      *staticFiles // the admin page
	appStatic   *staticFiles // the conversation page
	voice       engine.VoiceDetector
	turnCfg     engine.TurnConfig
	liveOff     bool
	sched       *engine.Scheduler
	live        *liveSessions
	rights      *grants         // work in progress by the key whose right it holds (rights.go)
	models      *models.Service // the models folder and its actions (models.go)
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
		platform: o.Platform,
		log:      o.Logger,
		now:      o.Now,
		version:  o.Version,
		limits:   o.Limits.withDefaults(),
		tls:      o.TLS,
		dataFile: o.DataFile,
		diskFree: o.DiskFree,

		publicURL:   o.PublicURL,
		corsOrigins: o.CORSOrigins,
		certs:       o.Certs,
		m4a:         o.M4A,
		node:        o.Node,
		rand:        o.Rand,
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if s.dataFile == "" {
		s.dataFile = o.Store.Describe()
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
	s.recent = newRecentInferences(recentMax)
	s.flights = newDialogFlights()
	s.otp = newOTPGuard(s.limits)
	s.totpOnly = o.TOTPOnly
	s.voice, s.turnCfg, s.liveOff, s.sched = o.Voice, o.Turn.WithDefaults(), o.LiveOff, o.Sched
	s.live = newLiveSessions()
	s.rights = newGrants()
	s.models = o.Models
	s.failures = newAuthFailures(s.limits.AuthFailuresPerMinute)
	s.kdfSlot = make(chan struct{}, 1)
	s.trusted = o.TrustedProxies
	s.uploads = &uploadBudget{avail: s.limits.UploadMemoryBytes}
	s.inflight = &keyInflight{n: map[string]int{}}
	s.reg = prometheus.NewRegistry()
	s.metrics = newMetrics(s.reg, s.health, s.version)

	var err error
	if s.clientMD, err = renderDoc("client.md", clientMDTemplate, s.docData()); err != nil {
		panic(err)
	}
	if s.openAPIYAML, err = renderDoc("openapi.yaml", openAPITemplate, s.docData()); err != nil {
		panic(err)
	}
	if s.static, err = newStaticFiles(web.AdminFS()); err != nil {
		panic(err)
	}
	if s.appStatic, err = newStaticFiles(web.AppFS()); err != nil {
		panic(err)
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.IPExtractor = ipExtractor(o.TrustedProxies)
	e.Use(s.requestID, s.securityHeaders, s.observe, s.recoverPanic, s.slowBody)
	s.routes(e, o.MetricsPublic)
	s.e = e
	return s
}

// Close logs the failed authentications still being counted, stops their
// flush timer, and cancels a model comparison in progress and waits for it.
// Call it before closing the store; the Server keeps serving.
func (s *Server) Close() {
	s.failMu.Lock()
	s.closed = true
	if s.failTimer != nil {
		s.failTimer.Stop()
		s.failTimer = nil
	}
	s.failMu.Unlock()
	s.writeFailSummaries(s.failures.flush(s.now(), true))
	if s.models != nil {
		s.models.StopCompares()
	}
}

// routes registers every route. The OpenAPI test walks e.Routes() and checks
// that each one is documented. Every GET route also answers HEAD (get), and
// no route group carries middleware: Echo answers a wrong method on a group
// with middleware 404 through the group's catch-all, while a route's own
// middleware keeps the router's 405 with Allow.
func (s *Server) routes(e *echo.Echo, metricsPublic bool) {
	get(e, "/healthz", s.handleHealthz)
	get(e, "/client.md", s.handleClientMD)
	get(e, "/openapi.yaml", s.handleOpenAPI)
	get(e, "/", s.handleRoot)
	get(e, "/admin", s.handleRoot)
	get(e, "/admin/*", s.handleAdminPage)
	get(e, "/app", s.handleAppRedirect)
	get(e, "/app/*", s.handleAppPage)
	get(e, "/tls/ca.pem", s.handleCACert)
	get(e, "/tls/cert.pem", s.handleServerCert)

	// The routes a tablet calls; browser clients on the origins listed in
	// REPLYD_CORS_ORIGINS may call them too.
	s.corsRoute(e, "/v1/infer", s.handleInfer, s.inferLog, s.bodyLimit)
	// A tablet pairs (POST) and unpairs (DELETE: it gives its key up).
	pairCORS := s.cors(http.MethodPost, http.MethodDelete)
	e.POST("/v1/pair", s.handlePair, pairCORS)
	e.DELETE("/v1/pair", s.handleUnpair, pairCORS)
	e.OPTIONS("/v1/pair", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, pairCORS)
	s.corsRoute(e, "/v1/feedback", s.handleFeedback)
	s.corsRoute(e, "/v1/live/ticket", s.handleLiveTicket)
	get(e, "/v1/live", s.handleLive)

	// OTP send and verify are how an administrator logs in: no credential.
	e.POST("/v1/admin/otp/send", s.handleOTPSend)
	e.POST("/v1/admin/otp/verify", s.handleOTPVerify)

	const a = "/v1/admin"
	e.DELETE(a+"/session", s.handleLogout, s.adminAuth)
	get(e, a+"/status", s.handleStatus, s.adminAuth)
	get(e, a+"/stats", s.handleStats, s.adminAuth)
	get(e, a+"/logs", s.handleLogs, s.adminAuth)
	get(e, a+"/keys", s.handleListKeys, s.adminAuth)
	e.POST(a+"/keys", s.handleCreateKey, s.adminAuth)
	e.DELETE(a+"/keys/:api_key_hash", s.handleRevokeKey, s.adminAuth)
	e.PUT(a+"/keys/:api_key_hash/live", s.handleLiveSwitch, s.adminAuth)
	e.POST(a+"/pairings", s.handleCreatePairing, s.adminAuth)
	get(e, a+"/system-prompt", s.handleGetPrompt, s.adminAuth)
	e.POST(a+"/system-prompt", s.handleSetPrompt, s.adminAuth)
	get(e, a+"/system-prompt/history", s.handlePromptHistory, s.adminAuth)
	get(e, a+"/backup", s.handleBackup, s.adminAuth)
	get(e, a+"/outcomes", s.handleOutcomesExport, s.adminAuth)
	get(e, a+"/users", s.handleListUsers, s.adminAuth)
	get(e, a+"/users/:user/pairs", s.handleUserPairs, s.adminAuth)
	e.DELETE(a+"/users/:user", s.handleDeleteUser, s.adminAuth)
	e.POST(a+"/users/:user/keys", s.handleLinkUserKey, s.adminAuth)
	e.DELETE(a+"/users/:user/keys/:api_key_hash", s.handleUnlinkUserKey, s.adminAuth)
	e.POST(a+"/try", s.handleTry, s.adminAuth, s.inferLog, s.bodyLimit)
	e.POST(a+"/totp/enroll", s.handleTOTPEnroll, s.adminAuth)
	get(e, a+"/models", s.handleListModels, s.adminAuth)
	e.POST(a+"/models", s.handleUploadModel, s.adminAuth)
	e.DELETE(a+"/models/:name", s.handleDeleteModel, s.adminAuth)
	e.POST(a+"/models/:name/activate", s.handleActivateModel, s.adminAuth)
	e.POST(a+"/models/:kind/rollback", s.handleRollbackModel, s.adminAuth)
	e.POST(a+"/models/:name/time", s.handleTimeModel, s.adminAuth)
	e.PUT(a+"/models/:name/window", s.handleDeclareWindow, s.adminAuth)
	e.POST(a+"/models/:name/compare", s.handleCompareModel, s.adminAuth)
	get(e, a+"/models/:name/compare", s.handleGetComparison, s.adminAuth)

	if !metricsPublic {
		get(e, "/metrics", echo.WrapHandler(s.MetricsHandler()), metricsBearer, s.adminAuth)
	}
}

// get registers h for GET and HEAD. net/http sends no body for HEAD, so
// the handler answers both alike.
func get(e *echo.Echo, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	e.GET(path, h, m...)
	e.HEAD(path, h, m...)
}

// Handler returns the http.Handler serving every route (the Echo instance).
func (s *Server) Handler() http.Handler { return s.e }

// HTTPServer returns an *http.Server for addr serving Handler with timeouts
// suited to uploads from tablets on a clinic LAN: headers within 10 s and at
// most 64 KiB of them, the body at MinBodyRate after BodyRateGrace (see
// slowBody) and the whole request within RequestReadTimeout (2 minutes),
// the answer within the inference timeout plus two minutes. Serve it on
// Listener(ln) to bound the connections per client address.
func (s *Server) HTTPServer(addr string) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           s.e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.limits.RequestReadTimeout,
		WriteTimeout:      2*time.Minute + s.limits.InferTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// Shutdown does not see the live sessions' hijacked connections.
	srv.RegisterOnShutdown(s.CloseLive)
	return srv
}

// m4aAvailable reports whether M4A/AAC uploads can be decoded now.
func (s *Server) m4aAvailable() bool { return s.m4a != nil && s.m4a() }

// uptime returns whole seconds since New.
func (s *Server) uptime() int64 {
	return int64(s.now().Sub(s.started) / time.Second)
}
