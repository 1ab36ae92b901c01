// Package whisper runs OpenAI's Whisper speech recognition on the CPU. It
// reads whisper.cpp's ggml model files (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1 and
// Q8_0 weights), computes the log-mel spectrogram, the encoder and the
// decoder the way whisper.cpp does, and decodes greedily with whisper.cpp's
// default rules and no timestamps. Products with many rows run on OpenBLAS
// through cgo; the decoder's few-row products, attention and the rest are Go
// or small C kernels. As in whisper.cpp, few-row products with quantised
// weights take activations quantised to q8_0. Greedy decoding picks each
// token through an int8 copy of an F16 or F32 token embedding with proven
// error bounds, exactly as the full product would (shadow.go). A *Model
// implements engine.Transcriber.
//
// Why replyd carries its own Whisper instead of linking whisper.cpp:
// whisper.cpp's Go binding (github.com/ggerganov/whisper.cpp/bindings/go)
// only wraps libwhisper, libggml, libggml-base and libggml-cpu, which must be
// built separately from whisper.cpp's C++ sources (its module zip holds the
// binding alone), so `go build` could no longer make replyd from a clone and
// the Go module proxy; and those libraries bring a ggml of their own, while
// llama.cpp, compiled in from the ollama module, brings another version of
// the same ggml symbols: two in one binary collide at link time or, worse,
// silently at run time. Whisper's inference is small (a mel spectrogram, a
// transformer encoder and decoder, greedy search), so this package
// implements it on OpenBLAS, reads whisper.cpp's model files unchanged, and
// is held to whisper.cpp's own numbers by the conformance tests
// (../shared/testdata/whisper, computed by whisper.cpp).
package whisper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/whisper/ggmlfile"
	"github.com/replyd/replyd/internal/cpubudget"
)

// DefaultMaxTokensPerWindow is the number of tokens one 30 s window may
// produce when Options.MaxTokensPerWindow is 0 (n_text_ctx/2 for Whisper).
const DefaultMaxTokensPerWindow = 224

// Options configure Load.
type Options struct {
	// Threads is the number of CPU threads used by OpenBLAS and by this
	// package's own loops; 0 means the cores the process may use
	// (internal/cpubudget). OpenBLAS's setting is
	// process-wide, so the last loaded model's value applies.
	Threads int
	// MaxTokensPerWindow caps the tokens decoded in one 30 s window,
	// counting the closing <|endoftext|>; 0 means DefaultMaxTokensPerWindow.
	// whisper.cpp's max_tokens = k corresponds to k+1 here (the reference
	// data's max_tokens 31 is 32). The cap is also kept below what the
	// text context can hold.
	MaxTokensPerWindow int
	// NoFallback turns whisper.cpp's temperature fallback off (its -nf):
	// every window is decoded greedily once. The token cap per second of
	// audio (temperature.go) applies either way.
	NoFallback bool
	// Compute is where the encoder and decoder run: ComputeBLAS (or "")
	// for replyd's own kernels and OpenBLAS, ComputeGGMLCPU for the ggml
	// graphs on ggml's CPU backend, ComputeGPU for them on a GPU backend
	// (graph.go). The control loop, the mel and the rules applied to the
	// logits are the same Go code on every path (the ggml path computes the
	// logits themselves on its backend).
	Compute string
	// DeviceReserve is memory on the graph path's device that the language
	// model will take (its layers on the same GPU): the graph is placed only
	// when its own memory and this fit in the device's free memory
	// (newGraph).
	DeviceReserve int64
	// CPUIfUnplaced loads the BLAS path when the graph path cannot be placed
	// (no GPU backend, too little free memory, a failed allocation),
	// saying why in the log and in Status; without it Load fails with that
	// error (ErrPlacement). REPLYD_WHISPER_BACKEND=auto sets it.
	CPUIfUnplaced bool
	// Window sizes the encoder's window of audio that fits one window
	// (window.go; REPLYD_WHISPER_WINDOW): the zero value is WindowAuto.
	// Every caller of Transcribe gets it; TranscribeWith overrides it.
	Window Window
	// ShortWindowWeights declares weights made for a short window (FUTO's
	// acft fine-tunes): WindowAuto then uses WindowSpeech instead of the
	// stock floor and margin.
	ShortWindowWeights bool
	// Demo marks a generated demo model in Status.
	Demo bool
	// Logger receives load and transcription logs; nil means slog.Default().
	Logger *slog.Logger
}

// ModelInfo describes a loaded model.
type ModelInfo struct {
	Path         string  `json:"path"`
	HParams      HParams `json:"hparams"`
	Type         string  `json:"type"` // "tiny", "base", "small", "medium", "large", by layer count
	Multilingual bool    `json:"multilingual"`
	WeightType   string  `json:"weight_type"` // type of the linear-layer weights: "f32", "f16", "q8_0", ...
	Bytes        int64   `json:"bytes"`       // host memory held by weights, vocabulary and the int8 shadow
	Languages    int     `json:"languages"`
	// Backend is the ggml backend of the graph path ("CPU", "CUDA0"), empty
	// on the BLAS path; DeviceBytes the memory the graph path holds there
	// (weights, caches, compute buffers).
	Backend     string `json:"backend,omitempty"`
	DeviceBytes int64  `json:"device_bytes,omitempty"`
}

// specialTokens are the ids of Whisper's control tokens in one vocabulary.
type specialTokens struct {
	eot, sot, translate, transcribe, solm, prev, nosp, not, beg int
	space                                                       int // the token whose text is " ", -1 if none
}

type layerNorm struct{ w, b []float32 }

type attention struct {
	q, k, v, o *weight
	qb, vb, ob []float32
}

type block struct {
	attnLn  layerNorm
	attn    attention
	crossLn layerNorm // decoder only
	cross   attention // decoder only
	mlpLn   layerNorm
	fc1     *weight
	fc1b    []float32
	fc2     *weight
	fc2b    []float32
}

// Model is a loaded Whisper model. It is safe for concurrent use: one
// transcription runs at a time and the others wait for their turn (or for
// their context to end).
type Model struct {
	path   string
	hp     HParams
	opts   Options
	log    *slog.Logger
	maxTok int
	// threads is how many threads the products run now; maxThreads the
	// most (Options.Threads). A transcription starts at its own Threads
	// (base) and may grow through grow (TranscribeOptions) between steps.
	threads, maxThreads, base int
	grow                      func(most int) int
	// stop is the running transcription's context, which the encoder
	// checks between its steps (encoderStep); nil outside Transcribe.
	stop context.Context
	// grown counts the steps that asked to grow, and those that ran on
	// lent cores (for the debug log).
	grown struct{ asked, lent int }
	// blasThreads is what OpenBLAS was last told to run (only the
	// encoder's products use it: see syncBLAS).
	blasThreads int
	loaded      time.Time
	// fallback: whisper.cpp's temperature fallback is on (Options.NoFallback).
	fallback bool

	multilingual bool
	nLangs       int
	tok          specialTokens
	vocab        [][]byte

	filters []float32 // [n_mels][nFilter]
	nFilter int

	conv1w, conv1b []float32 // [d][n_mels·3], [d]
	conv2w, conv2b []float32 // [d][d·3], [d]
	encPos         []float32 // [n_audio_ctx][d]
	enc            []block
	encLn          layerNorm

	decPos []float32 // [n_text_ctx][d]
	tokEmb *weight   // [n_vocab][d], also the output projection
	shadow *shadow   // int8 copy of tokEmb for greedy decoding, nil if none
	dec    []block
	decLn  layerNorm

	bytes int64
	wtype ggmlType

	owned   [][]byte      // C memory holding weights, freed by Close
	tensors *tensorArena  // the file's tensor data (huge.go), freed by Close; nil if none
	release func([]byte)  // frees owned; nil when the weights are on the Go heap
	gg      *graph        // the ggml graphs (Options.Compute), nil on the BLAS path
	comp    computePath   // where the encoder and decoder run: blasPath or graphPath
	scr     scratch       // buffers of the running transcription
	sem     chan struct{} // one transcription at a time
	waiting atomic.Int64  // transcriptions waiting for sem
	// nonEnglish counts the transcriptions an English-only model was asked
	// to make in another language (Status).
	nonEnglish atomic.Int64
	// shortened counts the windows encoded at a shortened audio_ctx,
	// netFired those of them the safety net decoded again at the full
	// window (Status).
	shortened, netFired atomic.Int64
	// shortWeights is Options.ShortWindowWeights, which
	// SetShortWindowWeights changes while the model serves.
	shortWeights atomic.Bool
	mu           sync.Mutex
	closed       bool

	// unplaced is why the graph path asked for could not be placed, when
	// Options.CPUIfUnplaced put the model on the BLAS path instead.
	unplaced string
}

// Load reads the whisper.cpp model file at path. A missing, truncated or
// malformed file gives an error that names the file and the reason.
func Load(path string, opts Options) (*Model, error) {
	g, err := readGGMLFile(path)
	if err != nil {
		return nil, fmt.Errorf("whisper: load %s: %w", path, err)
	}
	m, err := newModel(g, opts)
	if err != nil {
		g.arena.free()
		return nil, fmt.Errorf("whisper: load %s: %w", path, err)
	}
	m.path = path
	m.log.Info("whisper model loaded", "path", path, "type", m.Info().Type, "weight_type", m.wtype.String(),
		"multilingual", m.multilingual, "bytes", m.bytes, "threads", m.threads)
	return m, nil
}

// newModel builds a Model from a parsed file.
func newModel(g *ggmlFile, opts Options) (_ *Model, err error) {
	hp := g.hp
	kept := map[string]bool{}
	var m *Model
	// Tensor data no weight refers to is freed once the model is built; on
	// failure all of it is.
	defer func() {
		if g.release != nil {
			for name, t := range g.tensors {
				if kept[name] && err == nil {
					m.owned = append(m.owned, t.data)
				} else {
					g.release(t.data)
				}
			}
		}
		if err == nil {
			m.tensors = g.arena
		}
	}()
	m = &Model{hp: hp, opts: opts, log: opts.Logger, loaded: time.Now(), sem: make(chan struct{}, 1)}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.maxThreads = opts.Threads
	if m.maxThreads <= 0 {
		m.maxThreads = cpubudget.Cores()
	}
	m.threads, m.base = m.maxThreads, m.maxThreads
	m.syncBLAS()
	m.fallback = !opts.NoFallback
	m.shortWeights.Store(opts.ShortWindowWeights)
	m.maxTok = opts.MaxTokensPerWindow
	if m.maxTok <= 0 {
		m.maxTok = DefaultMaxTokensPerWindow
	}

	if g.nFilter < 2 {
		return nil, fmt.Errorf("%w: mel filter bank has %d bins", errFormat, g.nFilter)
	}
	if g.nFilter != nFFT/2+1 {
		return nil, fmt.Errorf("%w: mel filter bank has %d bins, want %d", errFormat, g.nFilter, nFFT/2+1)
	}
	m.filters, m.nFilter = g.filters, g.nFilter
	m.release = g.release
	m.vocab = g.vocab

	m.multilingual = hp.NVocab >= 51865
	ml := 0
	if m.multilingual {
		ml = 1
	}
	m.nLangs = hp.NVocab - 51765 - ml
	t := specialTokens{eot: 50256, sot: 50257, translate: 50357, transcribe: 50358, solm: 50359, prev: 50360,
		nosp: 50361, not: 50362, beg: 50363, space: -1}
	if m.multilingual {
		t.eot++
		t.sot++
		dt := m.nLangs - 98
		t.translate += dt
		t.transcribe += dt
		t.solm += dt
		t.prev += dt
		t.nosp += dt
		t.not += dt
		t.beg += dt
	}
	if t.beg >= hp.NVocab || len(g.vocab) > t.eot {
		return nil, fmt.Errorf("%w: vocabulary of %d stored tokens does not fit n_vocab %d", errFormat, len(g.vocab), hp.NVocab)
	}
	for id, s := range g.vocab {
		if string(s) == " " {
			t.space = id
			break
		}
	}
	m.tok = t

	d := hp.NAudioState
	s := &tensorSet{g: g, used: map[string]bool{}, kept: kept}
	m.conv1w = s.vec("encoder.conv1.weight", 3, hp.NMels, d)
	m.conv1b = s.vec("encoder.conv1.bias", 1, d)
	m.conv2w = s.vec("encoder.conv2.weight", 3, d, d)
	m.conv2b = s.vec("encoder.conv2.bias", 1, d)
	m.encPos = s.vec("encoder.positional_embedding", d, hp.NAudioCtx)
	ln := func(name string, n int) layerNorm {
		return layerNorm{w: s.vec(name+".weight", n), b: s.vec(name+".bias", n)}
	}
	att := func(p string, n int) attention {
		return attention{
			q: s.mat(p+".query.weight", n, n), qb: s.vec(p+".query.bias", n),
			k: s.mat(p+".key.weight", n, n),
			v: s.mat(p+".value.weight", n, n), vb: s.vec(p+".value.bias", n),
			o: s.mat(p+".out.weight", n, n), ob: s.vec(p+".out.bias", n),
		}
	}
	blk := func(p string, n int, cross bool) block {
		b := block{attnLn: ln(p+".attn_ln", n), attn: att(p+".attn", n), mlpLn: ln(p+".mlp_ln", n),
			fc1: s.mat(p+".mlp.0.weight", n, 4*n), fc1b: s.vec(p+".mlp.0.bias", 4*n),
			fc2: s.mat(p+".mlp.2.weight", 4*n, n), fc2b: s.vec(p+".mlp.2.bias", n)}
		if cross {
			b.crossLn = ln(p+".cross_attn_ln", n)
			b.cross = att(p+".cross_attn", n)
		}
		return b
	}
	for l := 0; l < hp.NAudioLayer; l++ {
		m.enc = append(m.enc, blk(fmt.Sprintf("encoder.blocks.%d", l), d, false))
	}
	m.encLn = ln("encoder.ln_post", d)
	dt := hp.NTextState
	m.decPos = s.vec("decoder.positional_embedding", dt, hp.NTextCtx)
	m.tokEmb = s.mat("decoder.token_embedding.weight", dt, hp.NVocab)
	for l := 0; l < hp.NTextLayer; l++ {
		m.dec = append(m.dec, blk(fmt.Sprintf("decoder.blocks.%d", l), dt, true))
	}
	m.decLn = ln("decoder.ln", dt)
	if s.err != nil {
		return nil, s.err
	}
	for _, name := range g.order {
		if !s.used[name] {
			m.log.Warn("whisper model has an unused tensor", "tensor", name)
		}
	}
	m.wtype = m.enc[0].attn.q.typ
	m.bytes = 4 * int64(len(m.filters)+len(m.conv1w)+len(m.conv1b)+len(m.conv2w)+len(m.conv2b)+len(m.encPos)+len(m.decPos))
	for _, v := range g.vocab {
		m.bytes += int64(len(v)) + 24
	}
	switch opts.Compute {
	case "", ComputeBLAS:
	case ComputeGGMLCPU, ComputeGPU:
		if m.gg, err = newGraph(m, opts.Compute == ComputeGPU, opts.DeviceReserve); err != nil {
			if !opts.CPUIfUnplaced {
				return nil, err
			}
			m.gg, err, m.unplaced = nil, nil, err.Error()
			m.log.Warn("speech-to-text falls back to the CPU (OpenBLAS): the graph path cannot be placed", "compute", opts.Compute, "reason", m.unplaced)
			break
		}
		m.gg.setThreads(m.threads)
		m.log.Info("whisper graph placed", "compute", opts.Compute, "where", m.gg.String(), "language_model_reserve", mib(opts.DeviceReserve))
		m.dropHostWeights(kept)
	default:
		return nil, fmt.Errorf("whisper: unknown compute path %q (want %s, %s or %s)", opts.Compute, ComputeBLAS, ComputeGGMLCPU, ComputeGPU)
	}
	if m.gg == nil {
		m.comp = &blasPath{m: m}
		// The ggml path computes the logits on its backend (graphPath.logits).
		m.buildShadow()
	} else {
		m.comp = &graphPath{m: m, g: m.gg}
	}
	m.bytes += m.tokEmb.bytes()
	m.bytes += m.shadow.bytes()
	for _, bs := range [][]block{m.enc, m.dec} {
		for i := range bs {
			b := &bs[i]
			for _, w := range []*weight{b.attn.q, b.attn.k, b.attn.v, b.attn.o, b.cross.q, b.cross.k, b.cross.v, b.cross.o, b.fc1, b.fc2} {
				if w != nil {
					m.bytes += w.bytes()
				}
			}
			for _, v := range [][]float32{b.attnLn.w, b.attnLn.b, b.crossLn.w, b.crossLn.b, b.mlpLn.w, b.mlpLn.b,
				b.attn.qb, b.attn.vb, b.attn.ob, b.cross.qb, b.cross.vb, b.cross.ob, b.fc1b, b.fc2b} {
				m.bytes += 4 * int64(len(v))
			}
		}
	}
	return m, nil
}

// modelType names the model size the way whisper.cpp does, by encoder
// layer count ("unknown" for another count).
func modelType(layers int) string {
	if n := ggmlfile.SizeName(layers); n != "" {
		return n
	}
	return "unknown"
}

// Info describes the model.
func (m *Model) Info() ModelInfo {
	info := ModelInfo{Path: m.path, HParams: m.hp, Type: modelType(m.hp.NAudioLayer), Multilingual: m.multilingual,
		WeightType: m.wtype.String(), Bytes: m.bytes, Languages: m.nLangs}
	if m.gg != nil {
		info.Backend, info.DeviceBytes = m.gg.name, m.gg.bytes()
	}
	return info
}

// dropHostWeights frees the host copy of the weights once they are on the
// graph's backend: the file's tensor data the matrices referred to (kept,
// freed by newModel) and the float32 vectors, which only the BLAS path
// reads. The weights keep their shapes; their data is gone.
func (m *Model) dropHostWeights(kept map[string]bool) {
	for name := range kept {
		kept[name] = false
	}
	drop := func(ws ...*weight) {
		for _, w := range ws {
			if w != nil {
				w.raw, w.f32 = nil, nil
			}
		}
	}
	drop(m.tokEmb)
	for _, bs := range [][]block{m.enc, m.dec} {
		for i := range bs {
			b := &bs[i]
			drop(b.attn.q, b.attn.k, b.attn.v, b.attn.o, b.cross.q, b.cross.k, b.cross.v, b.cross.o, b.fc1, b.fc2)
			b.attn.qb, b.attn.vb, b.attn.ob, b.cross.qb, b.cross.vb, b.cross.ob = nil, nil, nil, nil, nil, nil
			b.attnLn, b.crossLn, b.mlpLn, b.fc1b, b.fc2b = layerNorm{}, layerNorm{}, layerNorm{}, nil, nil
		}
	}
	m.conv1w, m.conv1b, m.conv2w, m.conv2b, m.encPos, m.decPos = nil, nil, nil, nil, nil, nil
	m.encLn, m.decLn = layerNorm{}, layerNorm{}
}

// Status reports the engine for /healthz and the admin page.
// SetShortWindowWeights declares, while the model serves, whether its
// weights are made for a short window (Options.ShortWindowWeights): the
// transcriptions that start after it use the new rule.
func (m *Model) SetShortWindowWeights(on bool) { m.shortWeights.Store(on) }

func (m *Model) Status() engine.EngineStatus {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	st := engine.EngineStatus{Name: "stt", Model: m.path, Ready: !closed, Demo: m.opts.Demo, Backend: "cpu", LoadedAt: m.loaded,
		QueueSize: len(m.sem) + int(m.waiting.Load())}
	if m.gg != nil && !m.gg.cpu {
		st.Backend = strings.ToLower(strings.TrimRight(m.gg.name, "0123456789")) // "CUDA0": "cuda", as the language model says
	}
	st.Window = m.describeWindow()
	st.WindowShortened, st.WindowRetries = m.shortened.Load(), m.netFired.Load()
	if m.unplaced != "" {
		st.Warning = "Speech-to-text runs on the CPU: its GPU path could not be placed (" + m.unplaced + ")."
	}
	if closed {
		st.Error = "closed"
	}
	if !m.multilingual {
		st.EnglishOnly = true
		st.NonEnglishRequests = m.nonEnglish.Load()
		if n := st.NonEnglishRequests; n > 0 {
			if st.Warning != "" {
				st.Warning += " "
			}
			st.Warning += fmt.Sprintf("This speech-to-text model is English-only: %d requests since the start asked for another language "+
				"and were transcribed as English. Install a multilingual Whisper model for them (scripts/fetch-models.sh).", n)
		}
	}
	return st
}

// Close releases the model. It waits for a running transcription to end;
// later calls to Transcribe fail. Close is idempotent.
func (m *Model) Close() error {
	m.sem <- struct{}{}
	defer func() { <-m.sem }()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.enc, m.dec, m.tokEmb = nil, nil, nil
	m.gg.free()
	m.gg = nil
	m.shadow.free()
	m.shadow = nil
	if m.release != nil {
		for _, b := range m.owned {
			m.release(b)
		}
	}
	m.owned = nil
	m.tensors.free()
	m.tensors = nil
	m.scr.free()
	return nil
}

// langCodes are Whisper's language codes by language id (whisper.cpp's
// table of 100).
var langCodes = strings.Fields(`en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no
th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc
ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue`)

// langID returns the id of a language code such as "de" or "de-AT", or -1.
func langID(code string) int {
	code = strings.ToLower(strings.TrimSpace(code))
	if i := strings.IndexAny(code, "-_"); i > 0 {
		code = code[:i]
	}
	for i, c := range langCodes {
		if c == code {
			return i
		}
	}
	return -1
}

// WriteDemoModel writes a tiny valid model with deterministic random
// weights (English-only, d = 64, 4 layers, F16) to path. Its transcripts
// are meaningless token strings; it exists so that replyd runs end to end
// without a real model.
func WriteDemoModel(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return WriteModel(path, DemoConfig())
}
