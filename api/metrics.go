package api

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// metrics are the Prometheus collectors of one Server, registered on the
// Server's own registry so that several Servers (tests) never collide.
type metrics struct {
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	stages      *prometheus.HistogramVec
	rateLimited prometheus.Counter
	inferences  *prometheus.CounterVec
	audio       prometheus.Histogram
	tokens      *prometheus.CounterVec
	tokensPerS  *prometheus.HistogramVec

	authFailures        *prometheus.CounterVec
	otpDeliveryFailures prometheus.Counter
	otpLocks            prometheus.Counter
	outcomes            *prometheus.CounterVec
	keystrokes          prometheus.Counter
	timeToChoice        prometheus.Histogram
	examples            prometheus.Counter
	steer               *steerMetrics
	live                *liveMetrics
}

func newMetrics(reg *prometheus.Registry, health HealthSource, version string) *metrics {
	m := &metrics{
		requests: counterVec("replyd_http_requests_total",
			"HTTP requests by route template, method and status.", "route", "method", "status"),
		latency: histogramVec("replyd_http_request_duration_seconds",
			"HTTP request latency by route template and status.",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "route", "status"),
		stages: histogramVec("replyd_inference_stage_seconds",
			"Time spent in each inference stage: decode, stt, prompt, generation, queue, total.",
			[]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "stage"),
		rateLimited: counter("replyd_rate_limited_total",
			"Inference requests refused with 429 by the per-key rate limit."),
		inferences: counterVec("replyd_inferences_total",
			"Inference requests by outcome code (ok or the error code).", "outcome"),
		audio: histogram("replyd_inference_audio_seconds",
			"Duration of the decoded recordings.",
			[]float64{1, 2, 5, 10, 20, 30, 60, 120}),
		tokens: counterVec("replyd_llm_tokens_total",
			"Language-model tokens: kind=prompt (evaluated), cached (reused from the dialog prefix cache), generated (sampled, all candidates).", "kind"),
		tokensPerS: histogramVec("replyd_llm_tokens_per_second",
			"Language-model throughput of one inference: phase=prompt (evaluated prompt tokens over the prompt stage) or generation (sampled tokens over the generation stage).",
			[]float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000}, "phase"),
		authFailures: counterVec("replyd_auth_failures_total",
			"Failed authentications by kind: api key, admin credential, login code (429s from the per-address throttle included).", "kind"),
		otpDeliveryFailures: counter("replyd_otp_delivery_failures_total",
			"Login codes (and login alerts) the OTP channel failed to deliver."),
		otpLocks: counter("replyd_otp_login_locks_total",
			"Times login by code was paused after wrong codes from any addresses."),
		outcomes: counterVec("replyd_outcomes_total",
			"Outcomes reported through /v1/feedback by outcome (spoken, edited, typed, none_fit) and system-prompt version; a replacement counts again. Acceptance is (spoken + edited) / all.",
			"outcome", "prompt_version"),
		keystrokes: counter("replyd_keystrokes_saved_total",
			"Keystrokes the reported outcomes saved (a suggestion's length minus one, less the edits)."),
		timeToChoice: histogram("replyd_time_to_choice_seconds",
			"Time from the answer to the user's choice, as tablets report it.",
			[]float64{1, 2, 5, 10, 20, 30, 60, 120, 300}),
		examples: counter("replyd_memory_examples_total",
			"Remembered replies put into prompts as examples (users with remember: true)."),
	}
	reg.MustRegister(m.outcomes, m.keystrokes, m.timeToChoice, m.examples)
	m.steer = newSteerMetrics(reg)
	m.live = newLiveMetrics(reg)
	reg.MustRegister(m.requests, m.latency, m.stages, m.rateLimited, m.inferences, m.audio, m.tokens, m.tokensPerS,
		m.authFailures, m.otpDeliveryFailures, m.otpLocks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if health != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "replyd_inference_queue_depth",
			Help: "Requests waiting for the language model.",
		}, func() float64 { return float64(health.QueueDepth()) }), engineCollector{health: health, version: version})
	}
	return m
}

// counter, counterVec, histogram and histogramVec make a collector of the
// given name and help text (and buckets, and labels).
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// engineCollector reads the engines' state at every scrape: readiness, the
// speech queue's depth and the build_info series.
type engineCollector struct {
	health  HealthSource
	version string
}

var (
	engineReadyDesc = prometheus.NewDesc("replyd_engine_ready",
		"1 when the engine's model is loaded and serving, 0 while it loads or after it failed.", []string{"engine"}, nil)
	speechQueueDesc = prometheus.NewDesc("replyd_speech_queue_depth",
		"Recordings waiting for or in speech-to-text.", nil, nil)
	windowDesc = prometheus.NewDesc("replyd_whisper_windows_total",
		"Transcriptions on Whisper's shortened encoder window (REPLYD_WHISPER_WINDOW) since start: kind=shortened (encoded short), retried (failed the fallback's tests and decoded again at the full 30 s window).", []string{"kind"}, nil)
	buildInfoDesc = prometheus.NewDesc("replyd_build_info",
		"Always 1: replyd's version, the model files in use (names, not paths) and whether a generated demo model is one of them.",
		[]string{"version", "llm_model", "whisper_model", "demo"}, nil)
)

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- engineReadyDesc
	ch <- speechQueueDesc
	ch <- windowDesc
	ch <- buildInfoDesc
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	var llmModel, sttModel string
	demo, sttDepth := false, 0
	for _, e := range c.health.Engines() {
		ready := 0.0
		if e.Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(engineReadyDesc, prometheus.GaugeValue, ready, e.Name)
		demo = demo || e.Demo
		switch e.Name {
		case "llm":
			llmModel = filepath.Base(e.Model)
		case "stt":
			sttModel, sttDepth = filepath.Base(e.Model), e.QueueSize
			ch <- prometheus.MustNewConstMetric(windowDesc, prometheus.CounterValue, float64(e.WindowShortened), "shortened")
			ch <- prometheus.MustNewConstMetric(windowDesc, prometheus.CounterValue, float64(e.WindowRetries), "retried")
		}
	}
	ch <- prometheus.MustNewConstMetric(speechQueueDesc, prometheus.GaugeValue, float64(sttDepth))
	ch <- prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1, c.version, llmModel, sttModel, strconv.FormatBool(demo))
}

func (m *metrics) observeRequest(route, method string, status int, d time.Duration) {
	st := strconv.Itoa(status)
	m.requests.WithLabelValues(route, method, st).Inc()
	m.latency.WithLabelValues(route, st).Observe(d.Seconds())
}

// observeInference records the stage timings of one finished inference.
func (m *metrics) observeInference(res engine.Result) {
	t := res.Timings
	for _, st := range []struct {
		name string
		d    time.Duration
	}{{"decode", t.Decode}, {"stt", t.STT}, {"prompt", t.Prompt}, {"generation", t.Generation}, {"queue", t.Queue}, {"total", t.Total}} {
		if st.d > 0 {
			m.stages.WithLabelValues(st.name).Observe(st.d.Seconds())
		}
	}
	if res.AudioSeconds > 0 {
		m.audio.Observe(res.AudioSeconds)
	}
	m.examples.Add(float64(res.Examples))
	evaluated := res.PromptTokens - res.CachedTokens
	if evaluated < 0 {
		evaluated = 0
	}
	m.tokens.WithLabelValues("prompt").Add(float64(evaluated))
	m.tokens.WithLabelValues("cached").Add(float64(res.CachedTokens))
	m.tokens.WithLabelValues("generated").Add(float64(res.GenTokens))
	if evaluated > 0 && t.Prompt > 0 {
		m.tokensPerS.WithLabelValues("prompt").Observe(float64(evaluated) / t.Prompt.Seconds())
	}
	if res.GenTokens > 0 && t.Generation > 0 {
		m.tokensPerS.WithLabelValues("generation").Observe(float64(res.GenTokens) / t.Generation.Seconds())
	}
}

// metricsBearer lets Prometheus authenticate its scrapes the standard way,
// Authorization: Bearer <admin key>: on /metrics only, and only when no
// admin header is sent, the bearer token is checked as X-ADMIN-KEY by
// adminAuth (which runs next).
func metricsBearer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if h.Get(HeaderAdminKey) == "" && h.Get(HeaderAdminSession) == "" {
			if tok, ok := strings.CutPrefix(h.Get(echo.HeaderAuthorization), "Bearer "); ok && strings.TrimSpace(tok) != "" {
				h.Set(HeaderAdminKey, strings.TrimSpace(tok))
			}
		}
		return next(c)
	}
}

// observeOutcome counts one accepted feedback report.
func (m *metrics) observeOutcome(o store.Outcome, promptVersion string) {
	m.outcomes.WithLabelValues(o.Kind, promptVersion).Inc()
	m.keystrokes.Add(float64(o.KeystrokesSaved))
	if o.TimeToChoiceMS >= 0 {
		m.timeToChoice.Observe(float64(o.TimeToChoiceMS) / 1000)
	}
}

// MetricsHandler serves the Prometheus metrics of this Server. With
// Options.MetricsPublic cmd mounts it on a separate listener; otherwise it
// is also served at GET /metrics behind admin authentication.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
}
