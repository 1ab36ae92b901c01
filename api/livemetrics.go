package api

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replyd/replyd/engine"
)

// liveMetrics are the Prometheus collectors of live listening.
type liveMetrics struct {
	sessions  prometheus.Gauge
	spec      *prometheus.CounterVec
	workStart *prometheus.HistogramVec
	// replies counts the replies generated ahead from a speculative
	// pass's transcript, by what the committed turn did with them.
	replies *prometheus.CounterVec
	// passes counts the speech passes live sessions started: the only
	// way a session makes Whisper or language-model work.
	passes *prometheus.CounterVec
	// heldPeak is the most audio one session held, outside a turn
	// (listening: the pre-roll and a sound weighed as a turn's start) and
	// in one, since the box started.
	heldPeak *prometheus.GaugeVec
	peakMu   sync.Mutex
	peak     [2]int // samples: listening, turn
}

// observeHeld records the samples a session holds now.
func (m *liveMetrics) observeHeld(samples int, inTurn bool) {
	i, state := 0, "listening"
	if inTurn {
		i, state = 1, "turn"
	}
	m.peakMu.Lock()
	defer m.peakMu.Unlock()
	if samples > m.peak[i] {
		m.peak[i] = samples
		m.heldPeak.WithLabelValues(state).Set(float64(samples) / engine.LiveRate)
	}
}

func newLiveMetrics(reg *prometheus.Registry) *liveMetrics {
	m := &liveMetrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replyd_live_sessions",
			Help: "Live sessions open now.",
		}),
		spec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replyd_live_speculative_total",
			Help: "Speculative speech passes of live turns by outcome: reused by the committed turn, canceled by resumed speech, failed (stopped for committed work, or an error).",
		}, []string{"outcome"}),
		workStart: histogramVec("replyd_live_work_start_seconds",
			"Time from the arrival of a live turn's last voiced audio to the start of the speech pass whose transcript the turn uses, by pass: speculative (started at the first pause and kept) or final (started when the turn ended).",
			[]float64{.025, .05, .1, .15, .2, .25, .3, .35, .4, .5, .6, .75, 1, 1.5, 2, 5}, "pass"),
	}
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replyd_live_passes_total",
		Help: "Speech passes (voice detection and Whisper; the final one then the language model) that live sessions started, by kind: speculative (at a pause), final (a committed turn) or caption (the turn's words so far, while the partner speaks). Noise that starts no turn starts none.",
	}, []string{"kind"})
	m.heldPeak = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "replyd_live_audio_held_peak_seconds",
		Help: "The most audio one live session has held since the start, by state: listening (outside a turn: the pre-roll, or a sound not yet long enough to start a turn) or turn.",
	}, []string{"state"})
	for _, k := range []string{"speculative", "final", "caption"} {
		m.passes.WithLabelValues(k)
	}
	m.replies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replyd_live_replies_ahead_total",
		Help: "Replies generated from a live turn's speculative transcript before the turn ended, by outcome at the turn's end: reused (shown), failed (stopped for committed work, or an error), stale (the payload changed). Those canceled by resumed speech are counted in replyd_live_speculative_total.",
	}, []string{"outcome"})
	for _, k := range []string{"reused", "failed", "stale"} {
		m.replies.WithLabelValues(k)
	}
	for _, st := range []string{"listening", "turn"} {
		m.heldPeak.WithLabelValues(st)
	}
	reg.MustRegister(m.sessions, m.spec, m.workStart, m.passes, m.heldPeak, m.replies)
	return m
}

// sessionMetrics is a live session's engine.LiveMetrics: the collectors,
// and the session's logger for the line on when a turn's work started.
type sessionMetrics struct {
	m   *liveMetrics
	log *slog.Logger
}

func (sm sessionMetrics) Pass(kind string)              { sm.m.passes.WithLabelValues(kind).Inc() }
func (sm sessionMetrics) Speculative(outcome string)    { sm.m.spec.WithLabelValues(outcome).Inc() }
func (sm sessionMetrics) RepliesAhead(outcome string)   { sm.m.replies.WithLabelValues(outcome).Inc() }
func (sm sessionMetrics) Held(samples int, inTurn bool) { sm.m.observeHeld(samples, inTurn) }

// WorkStarted reports how long after the turn's last voiced window arrived
// the work whose transcript the turn uses started: the histogram
// replyd_live_work_start_seconds and a debug line, which carries both
// instants (Unix microseconds) for benchmarks that hold the end of speech
// in another clock (tests/browser/livelatency.mjs).
func (sm sessionMetrics) WorkStarted(pass string, voiceEnd, start time.Time) {
	d := max(start.Sub(voiceEnd), 0)
	sm.m.workStart.WithLabelValues(pass).Observe(d.Seconds())
	sm.log.Debug("live turn work started", "pass", pass, "after_voice_ms", float64(d.Microseconds())/1000,
		"voice_end_unix_us", voiceEnd.UnixMicro(), "work_start_unix_us", start.UnixMicro())
}
