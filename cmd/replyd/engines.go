package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/slot"
	"github.com/replyd/replyd/engine/vad"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/models"
)

// engines holds the two models while they load and after. It implements
// engine.Transcriber and engine.Generator for the pipeline (answering
// KindNotReady until the model is loaded, KindLoading while a switch has
// unloaded it), api.HealthSource for /healthz, and models.Engines
// (switch.go) and the candidates' models (candidates.go) for the models
// package's switch, timing and comparison.
type engines struct {
	// stt and llm hold each engine's current model and the requests using
	// it; a switch (models.SwitchSlot) replaces it there, beside the old
	// one or after draining it.
	stt slot.Slot[*whisper.Model]
	llm slot.Slot[*llm.Engine]

	mu   sync.RWMutex                   // guards the fields below
	pend map[string]engine.EngineStatus // status of engines not loaded (yet, or again)
	vad  engine.EngineStatus            // voice activity detection: on, or off and why

	// loadTook is how long each engine's model took to load last.
	loadTook map[string]time.Duration
	// cfg, cpu and log are what load was given; a switch opens with them.
	cfg *Config
	cpu *engine.Scheduler
	log *slog.Logger
	// windows is the window declaration of a Whisper file (stored with
	// the file's records: models.WindowOf); nil: the configured default
	// (REPLYD_WHISPER_SHORT_WINDOW) for every file.
	windows func(path string) (models.WindowDeclaration, error)
}

// loadVAD loads Silero VAD from path for the pipeline. A missing or
// unreadable file is not fatal: replyd then transcribes whole recordings,
// says so at start, and /healthz reports "vad": "off".
func loadVAD(path string, log *slog.Logger) (*vad.Detector, engine.EngineStatus) {
	st := engine.EngineStatus{Name: "vad", Model: path, Backend: "cpu"}
	if path == "" {
		st.Error = "no VAD model configured"
	} else if m, err := vad.Load(path); err != nil {
		st.Error = err.Error()
	} else {
		d := vad.NewDetector(m)
		log.Info("voice activity detection on", "model", path)
		return d, d.Status()
	}
	log.Warn("voice activity detection is OFF: whole recordings are transcribed, silence and noise included (run scripts/vad-model.sh or set REPLYD_VAD_MODEL)",
		"model", path, "reason", st.Error)
	return nil, st
}

func newEngines(cfg *Config) *engines {
	return &engines{pend: map[string]engine.EngineStatus{
		"stt": {Name: "stt", Model: cfg.WhisperModel, Demo: isDemoModel(cfg.WhisperModel)},
		"llm": {Name: "llm", Model: cfg.LLMModel, Demo: isDemoModel(cfg.LLMModel)},
	}, loadTook: map[string]time.Duration{}, cfg: cfg}
}

// isDemoModel reports whether path names one of the generated models with
// random weights: the demo models or one `replyd models synth` wrote.
func isDemoModel(path string) bool {
	base := filepath.Base(path)
	return base == filepath.Base(DefaultLLMModel) || base == filepath.Base(DefaultWhisperModel) ||
		strings.HasPrefix(base, synthPrefix)
}

// load loads Whisper, then the language model, one after the other (they
// would only compete for the same cores). It returns the first error, which
// names the file and the reason.
func (e *engines) load(cfg *Config, cpu *engine.Scheduler, log *slog.Logger) error {
	e.mu.Lock()
	e.cpu, e.log = cpu, log
	e.mu.Unlock()
	t0 := time.Now()
	stt, err := openWhisper(cfg, cfg.WhisperModel, e.shortWindow(cfg.WhisperModel), log)
	if err != nil {
		e.setError("stt", err)
		return fmt.Errorf("speech-to-text model: %w", err)
	}
	e.stt.Put(stt)
	e.mu.Lock()
	e.loadTook["stt"] = time.Since(t0)
	delete(e.pend, "stt")
	e.mu.Unlock()
	log.Info("speech-to-text model loaded", "model", cfg.WhisperModel, "ms", time.Since(t0).Milliseconds(),
		"backend", stt.Backend(), "bytes", stt.Info().Bytes, "device_bytes", stt.Info().DeviceBytes)

	t1 := time.Now()
	lm, err := openLLM(cfg, cfg.LLMModel, cpu, log)
	if err != nil {
		e.setError("llm", err)
		return fmt.Errorf("language model: %w", err)
	}
	e.llm.Put(lm)
	e.mu.Lock()
	e.loadTook["llm"] = time.Since(t1)
	delete(e.pend, "llm")
	e.mu.Unlock()
	log.Info("language model loaded and warmed up", "model", cfg.LLMModel, "ms", time.Since(t1).Milliseconds())
	return nil
}

// shortWindow is the window declaration of the Whisper file at path (the
// admin's, stored with the file's records, else the configured default),
// logged: whether its weights are made for a short window.
func (e *engines) shortWindow(path string) bool {
	d := models.WindowDeclaration{ShortWindow: e.cfg.WhisperShortWindow == "on", Source: models.WindowDefault}
	if e.windows != nil {
		var err error
		if d, err = e.windows(path); err != nil {
			e.logger().Warn("the Whisper file's window declaration could not be read: using the configured default",
				"model", path, "short_window", d.ShortWindow, "error", err.Error())
		}
	}
	e.logger().Info("whisper window declaration", "model", path, "short_window", d.ShortWindow, "source", d.Source)
	return d.ShortWindow
}

// logger is the engines' logger, the default one before load set it.
func (e *engines) logger() *slog.Logger {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.log == nil {
		return slog.Default()
	}
	return e.log
}

// SetShortWindow implements models.WindowSetter: the admin's new window
// declaration of the Whisper file path applies at once when it is the
// loaded model.
func (e *engines) SetShortWindow(path string, short bool) bool {
	applied := false
	e.stt.Peek(func(m *whisper.Model) {
		if sameFile(m.Status().Model, path) {
			m.SetShortWindowWeights(short)
			applied = true
		}
	})
	return applied
}

// sameFile reports whether the paths a and b name one file.
func sameFile(a, b string) bool {
	sa, erra := os.Stat(a)
	sb, errb := os.Stat(b)
	return erra == nil && errb == nil && os.SameFile(sa, sb)
}

// openWhisper loads the Whisper model at path with cfg's settings; short
// is its window declaration (engines.shortWindow).
func openWhisper(cfg *Config, path string, short bool, log *slog.Logger) (*whisper.Model, error) {
	compute, err := whisperCompute(cfg.WhisperBackend, cfg.GPULayers, whisper.GPUPresent)
	if err != nil {
		return nil, err
	}
	cpuIfUnplaced, reserve := whisperPlacement(cfg, compute)
	window, err := whisper.ParseWindow(cfg.WhisperWindow)
	if err != nil {
		return nil, err
	}
	return whisper.Load(path, whisper.Options{
		Window:             window,
		ShortWindowWeights: short,
		Compute:            compute,
		Threads:            cfg.SpeechThreadsMax(),
		NoFallback:         cfg.WhisperFallback == "off",
		// whisper.cpp's max_tokens k is k text tokens and the closing
		// <|endoftext|>: MaxTokensPerWindow k+1.
		MaxTokensPerWindow: whisperMaxTokens(cfg.WhisperMaxTokens),
		Demo:               isDemoModel(path),
		Logger:             log.With("engine", "stt"),
		CPUIfUnplaced:      cpuIfUnplaced,
		DeviceReserve:      reserve,
	})
}

// openLLM opens the language model at path with cfg's settings; it returns
// once the model is warm (llm.Open decodes and times it).
func openLLM(cfg *Config, path string, cpu *engine.Scheduler, log *slog.Logger) (*llm.Engine, error) {
	opts, err := llmOptions(cfg, path, cpu, log)
	if err != nil {
		return nil, err
	}
	return llm.Open(opts)
}

// llmOptions are the language model's options of cfg for the file path.
func llmOptions(cfg *Config, path string, cpu *engine.Scheduler, log *slog.Logger) (llm.Options, error) {
	decoding, err := llm.ParseDecoding(cfg.Decoding)
	if err != nil {
		return llm.Options{}, err
	}
	return llm.Options{
		ModelPath:      path,
		ContextPerSeq:  cfg.ContextPerSeq,
		Threads:        cfg.Threads,
		GPULayers:      cfg.GPULayers,
		Seed:           uint32(cfg.Seed),
		MaxReplyTokens: cfg.MaxReplyTokens,
		MaxCandidates:  maxCandidates,
		PrefixCacheMiB: cfg.PrefixCacheMiB,
		Decoding:       decoding,
		// The history's time budget (history.go), at the prompt speed
		// Open measures.
		ColdPromptTarget: cfg.ColdPromptTarget,
		CPU:              cpu,
		Demo:             isDemoModel(path),
		Logger:           log.With("engine", "llm"),
	}, nil
}

func (e *engines) setError(name string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.pend[name]
	st.Error = err.Error()
	e.pend[name] = st
}

// Transcribe implements engine.Transcriber. The request finishes on the
// model that was current when it began, even when a switch replaces it
// meanwhile.
func (e *engines) Transcribe(ctx context.Context, pcm []float32, opts engine.TranscribeOptions) (engine.Transcript, error) {
	stt, release, err := e.stt.Acquire()
	if err != nil {
		return engine.Transcript{}, e.unloaded("stt", err)
	}
	defer release()
	tr, err := stt.Transcribe(ctx, pcm, opts)
	tr.Model = filepath.Base(stt.Status().Model)
	return tr, err
}

// Prefill implements engine.Prefiller; it does nothing while the language
// model is loading.
func (e *engines) Prefill(ctx context.Context, req engine.GenerateRequest) {
	if lm, release, err := e.llm.Acquire(); err == nil {
		lm.Prefill(ctx, req)
		release()
	}
}

// Generate implements engine.Generator. The request finishes on the model
// that was current when it began, even when a switch replaces it meanwhile.
func (e *engines) Generate(ctx context.Context, req engine.GenerateRequest) (engine.Generation, error) {
	lm, release, err := e.llm.Acquire()
	if err != nil {
		return engine.Generation{}, e.unloaded("llm", err)
	}
	defer release()
	gen, err := lm.Generate(ctx, req)
	gen.Model = filepath.Base(lm.Status().Model)
	return gen, err
}

// Engines implements api.HealthSource: speech-to-text first, then the LLM.
func (e *engines) Engines() []engine.EngineStatus {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]engine.EngineStatus, 0, 2)
	if !e.stt.Peek(func(m *whisper.Model) { out = append(out, m.Status()) }) {
		out = append(out, e.pend["stt"])
	}
	if !e.llm.Peek(func(m *llm.Engine) { out = append(out, m.Status()) }) {
		out = append(out, e.pend["llm"])
	}
	return out
}

// VAD implements api.VADSource.
func (e *engines) VAD() engine.EngineStatus {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.vad
}

// QueueDepth implements api.HealthSource.
func (e *engines) QueueDepth() int {
	n := 0
	e.llm.Peek(func(m *llm.Engine) { n = m.QueueDepth() })
	return n
}

// close releases the engines, each once the requests still using it are
// done.
func (e *engines) close() {
	_ = e.llm.Close()
	_ = e.stt.Close()
}

// ensureModels checks that both model files exist. When a model path is the
// default demo path and the file is missing, it writes the demo models there:
// that is the out-of-the-box experience of `make run`. A configured path that
// does not exist is an error naming the file.
func ensureModels(cfg *Config, log *slog.Logger) error {
	var missing []string
	for _, p := range []string{cfg.WhisperModel, cfg.LLMModel} {
		if _, err := os.Stat(p); err != nil {
			if p == DefaultLLMModel || p == DefaultWhisperModel {
				missing = append(missing, p)
				continue
			}
			return fmt.Errorf("model file %s: %w (set REPLYD_LLM_MODEL / REPLYD_WHISPER_MODEL, or run `replyd models demo`)", p, err)
		}
	}
	if len(missing) > 0 {
		dir := filepath.Dir(DefaultLLMModel)
		log.Warn("no model configured: writing the demo models", "dir", dir, "missing", strings.Join(missing, ","))
		if err := writeDemoModels(dir); err != nil {
			return err
		}
	}
	return nil
}

// writeDemoModels writes the two tiny random-weight demo models into dir.
func writeDemoModels(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo models: %w", err)
	}
	if err := llm.WriteDemoModel(filepath.Join(dir, filepath.Base(DefaultLLMModel))); err != nil {
		return fmt.Errorf("demo language model: %w", err)
	}
	if err := whisper.WriteDemoModel(filepath.Join(dir, filepath.Base(DefaultWhisperModel))); err != nil {
		return fmt.Errorf("demo Whisper model: %w", err)
	}
	return nil
}

// voiceOf is the live sessions' voice detector: d, or nil when the VAD
// model is not loaded (live sessions are then refused with 503 not_ready).
func voiceOf(d *vad.Detector) engine.VoiceDetector {
	if d == nil {
		return nil
	}
	return d
}

// whisperCompute resolves REPLYD_WHISPER_BACKEND to a whisper compute path:
// auto takes the GPU whenever the language model goes there (gpuLayers not
// 0 and gpuPresent), else replyd's own CPU path.
func whisperCompute(backend string, gpuLayers int, gpuPresent func() bool) (string, error) {
	switch backend {
	case "", "auto":
		if gpuLayers != 0 && gpuPresent() {
			return whisper.ComputeGPU, nil
		}
		return whisper.ComputeBLAS, nil
	case "cpu":
		return whisper.ComputeBLAS, nil
	case "gpu":
		return whisper.ComputeGPU, nil
	case "ggml-cpu":
		return whisper.ComputeGGMLCPU, nil
	}
	return "", fmt.Errorf("REPLYD_WHISPER_BACKEND %q: want auto, cpu, gpu or ggml-cpu", backend)
}

// whisperMaxTokens maps REPLYD_WHISPER_MAX_TOKENS (whisper.cpp's max_tokens,
// 0 = off) to whisper.Options.MaxTokensPerWindow.
func whisperMaxTokens(n int) int {
	if n <= 0 {
		return 0
	}
	return n + 1
}
