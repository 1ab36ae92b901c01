package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/audio"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/internal/disk"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/notify"
	"github.com/replyd/replyd/recall"
	"github.com/replyd/replyd/store"
)

// maxCandidates is the upper bound of options.max_candidates; the API
// enforces it and the language model sizes its sequences for it.
var maxCandidates = api.DefaultLimits().MaxCandidates

// Server is a running replyd: the store, the engines, the HTTP listeners and
// the background jobs. Run starts it; Close stops it.
type Server struct {
	cfg    *Config
	log    *slog.Logger
	stderr io.Writer

	db      store.Store
	api     *api.Server
	eng     *engines
	http    *http.Server
	metrics *http.Server
	ln      net.Listener
	tls     *tlsSetup // nil when TLS is off

	fatal chan error // a model failed to load, or a listener died
	stop  context.CancelFunc
	bg    chan struct{}
}

// Run opens everything and starts serving. Models load in the background:
// /healthz answers 503 {"status":"loading"} until both are ready.
func (s *Server) Run(ctx context.Context) error {
	cfg := s.cfg
	db, err := openStore(ctx, cfg, s.log)
	if err != nil {
		return err
	}
	s.db = db

	if err := ensureAdminKey(db, cfg.AdminKey, s.stderr, s.log); err != nil {
		return err
	}
	if _, err := api.SeedDefaultPrompt(db, time.Now()); err != nil {
		return fmt.Errorf("saving the built-in system prompt: %w", err)
	}

	s.warnIfNearlyFull()
	tempDir := filepath.Join(cfg.DataDir, "tmp")
	if n, err := audio.PrepareTempDir(tempDir); err != nil {
		return fmt.Errorf("temporary folder %s: %w", tempDir, err)
	} else if n > 0 {
		s.log.Info("removed temporary copies of recordings left by an earlier run", "count", n, "dir", tempDir)
	}

	var notifier api.Notifier
	if cfg.OTPChannel != api.ChannelTOTP {
		n, err := notify.New(notifyConfig(cfg, s.stderr))
		if err != nil {
			return fmt.Errorf("OTP channel: %w", err)
		}
		notifier = n
	}

	chosenModels(db, cfg, s.log)
	if err := ensureModels(cfg, s.log); err != nil {
		return err
	}
	s.eng = newEngines(cfg)
	s.eng.windows = func(path string) (models.WindowDeclaration, error) {
		return models.WindowOf(db, cfg.NodeName, modelsDir(cfg.DataDir), path, cfg.WhisperShortWindow == "on")
	}

	var tlsCfg *tls.Config
	var certs api.CertSource
	if cfg.TLSEnabled() {
		s.tls, err = loadTLS(cfg, s.log)
		if err != nil {
			return err
		}
		tlsCfg, certs = s.tls.config, s.tls.certs
	}
	corsOrigins, err := api.ParseCORSOrigins(cfg.CORSOrigins)
	if err != nil {
		return fmt.Errorf("REPLYD_CORS_ORIGINS: %w", err)
	}
	if len(corsOrigins) > 0 {
		s.log.Info("browser pages on other origins may call /v1/infer, /v1/pair and /v1/feedback", "cors_origins", strings.Join(corsOrigins, ","))
	}
	if !audio.M4AAvailable() {
		s.log.Warn("ffmpeg is not installed: M4A/AAC recordings (what iOS records) are refused with 415; install ffmpeg (Debian package ffmpeg) to accept them")
	}

	// One scheduler for both engines: their busy threads never exceed the
	// cores. Each stage admits one in service plus the waiting ones; beyond
	// that, or when the wait would outlast the request's deadline, 503
	// overloaded at once. These stages are the only bound of the engines'
	// queues.
	cpu := engine.NewScheduler(engine.SchedulerConfig{
		Cores: cfg.CPUCores, STTThreads: cfg.SpeechThreads(),
		STTQueue: cfg.STTQueueSize + 1, LLMQueue: cfg.QueueSize + 1,
		MaxWaitRatio: cfg.MaxWaitRatio, MaxDecodes: cfg.MaxDecodes,
	})
	pipe := &engine.Pipeline{Decode: audio.Decoder{TempDir: tempDir}.Decode, STT: s.eng, LLM: s.eng, MaxAudio: cfg.MaxAudio,
		Memory: recall.New(db, 0), Sched: cpu, Overlap: cfg.Overlap == "on"}
	det, vadStatus := loadVAD(cfg.VADModel, s.log)
	if det != nil {
		pipe.VAD = det
	}
	s.eng.mu.Lock()
	s.eng.vad = vadStatus
	s.eng.mu.Unlock()
	// The models feature: the folder, and the switch, timing and
	// comparison of the engines' models, one action at a time.
	mods := models.NewService(models.ServiceOptions{Dir: modelsDir(cfg.DataDir), Node: cfg.NodeName, Store: db, Log: s.log,
		Engines: s.eng, LLM: languageModels{s.eng}, STT: speechModels{s.eng}, CPU: cpu,
		// A Whisper file the admin declared nothing of.
		ShortWindowDefault: cfg.WhisperShortWindow == "on", Windows: s.eng})
	limits := api.DefaultLimits()
	limits.MaxBodyBytes = int64(cfg.MaxBodyMiB) << 20
	limits.MaxAudio = cfg.MaxAudio
	limits.InferTimeout = cfg.InferTimeout
	limits.SessionTTL = cfg.SessionTTL
	limits.PromptBudgetTokens = llm.PromptBudget(cfg.ContextPerSeq, cfg.MaxReplyTokens)
	limits.OTPTTL = cfg.OTPTTL
	limits.OTPResendInterval = cfg.OTPResendInterval
	limits.MinFreeBytes = int64(cfg.MinFreeMB) << 20
	srv := api.New(api.Options{
		Store:          db,
		Inferer:        pipe,
		Notifier:       notifier,
		Health:         s.eng,
		Logger:         s.log,
		Version:        version,
		Limits:         limits,
		MetricsPublic:  cfg.MetricsAddr != "",
		TLS:            s.tls != nil,
		Node:           cfg.NodeName,
		TrustedProxies: cfg.TrustedNets,
		TOTPOnly:       cfg.OTPChannel == api.ChannelTOTP,
		DiskFree:       func() (int64, error) { return disk.Free(cfg.DataDir) },
		Models:         mods,
		PublicURL:      cfg.PublicURL,
		CORSOrigins:    corsOrigins,
		Certs:          certs,
		M4A:            audio.M4AAvailable,
		Voice:          voiceOf(det),
		Turn:           engine.TurnConfig{EndSilence: cfg.LiveEndSilence, MaxTurn: cfg.MaxAudio},
		LiveOff:        cfg.Live == "off",
		Sched:          cpu,
		Platform:       platformRef(cfg.CPUCores),
	})
	s.api = srv

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	ln = srv.Listener(ln) // at most MaxConnsPerAddr connections per client address
	s.ln = ln
	s.http = srv.HTTPServer(cfg.Addr)
	s.http.TLSConfig = tlsCfg
	s.fatal = make(chan error, 4)
	go func() {
		var err error
		if tlsCfg != nil {
			err = s.http.ServeTLS(ln, "", "")
		} else {
			err = s.http.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.fatal <- fmt.Errorf("http server: %w", err)
		}
	}()
	scheme := "http"
	if s.tls != nil {
		scheme = "https"
	}
	base := fmt.Sprintf("%s://%s", scheme, displayAddr(ln.Addr()))
	if cfg.PublicURL != "" {
		base = strings.TrimSuffix(cfg.PublicURL, "/")
	}
	s.log.Info("replyd listening", "node", cfg.NodeName, "store", db.Describe(), "addr", ln.Addr().String(), "admin_page", base+"/admin/", "conversation_page", base+"/app/", "version", version)
	if s.tls == nil && !isLoopback(ln.Addr()) {
		s.log.Warn("TLS is off: API keys, admin keys and dialog text cross the LAN in clear; set REPLYD_TLS=auto or REPLYD_TLS_CERT/REPLYD_TLS_KEY")
	}

	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on %s (metrics): %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.MetricsHandler())
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := s.metrics.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.fatal <- fmt.Errorf("metrics server: %w", err)
			}
		}()
		s.log.Info("metrics listening without auth", "addr", mln.Addr().String())
	}

	bgctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.bg = make(chan struct{})
	go func() {
		defer close(s.bg)
		s.housekeeping(bgctx)
	}()
	notifySystemd(s.log, "STATUS=loading the models")
	go func() {
		if err := s.eng.load(cfg, cpu, s.log); err != nil {
			s.fatal <- err
			return
		}
		s.log.Info("replyd ready")
		// Under systemd (Type=notify) the unit becomes active only now,
		// when /healthz answers 200.
		notifySystemd(s.log, daemon.SdNotifyReady+"\nSTATUS=serving")
	}()
	return nil
}

// notifySystemd sends state to the service manager when replyd runs under
// systemd with Type=notify ($NOTIFY_SOCKET set); elsewhere it does nothing.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("notifying systemd failed", "error", err.Error())
	}
}

// Wait blocks until ctx ends (a signal) or a fatal error happens.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.fatal:
		return err
	}
}

// Close shuts down gracefully: stop accepting, let in-flight requests finish
// within the grace period, stop the background jobs, release the engines and
// close the store (which flushes batched log writes).
func (s *Server) Close() error {
	notifySystemd(s.log, daemon.SdNotifyStopping)
	var errs []error
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		cancel()
	}
	if s.metrics != nil {
		_ = s.metrics.Close()
	}
	if s.stop != nil {
		s.stop()
		<-s.bg
	}
	if s.api != nil {
		s.api.Close() // logs the failed authentications still being counted
	}
	if s.eng != nil {
		s.eng.close()
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the store: %w", err))
		}
	}
	return errors.Join(errs...)
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// displayAddr turns a wildcard listen address into something a person can
// paste into a browser.
func displayAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ta.IP.IsUnspecified() {
		host, _ := os.Hostname()
		if host == "" || strings.ContainsAny(host, " /") {
			host = "localhost"
		}
		return net.JoinHostPort(host, fmt.Sprint(ta.Port))
	}
	return ta.String()
}
