package whisper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/replyd/replyd/engine"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// demoPath writes the demo model once per test binary and returns its path.
var demoOnce struct {
	sync.Once
	path string
	data []byte
	err  error
}

func demoModel(t testing.TB) (string, []byte) {
	t.Helper()
	demoOnce.Do(func() {
		dir, err := os.MkdirTemp("", "whisper-demo")
		if err != nil {
			demoOnce.err = err
			return
		}
		demoOnce.path = filepath.Join(dir, "demo.bin")
		if demoOnce.err = WriteDemoModel(demoOnce.path); demoOnce.err == nil {
			demoOnce.data, demoOnce.err = os.ReadFile(demoOnce.path)
		}
	})
	if demoOnce.err != nil {
		t.Fatal(demoOnce.err)
	}
	return demoOnce.path, demoOnce.data
}

func TestMain(m *testing.M) {
	code := m.Run()
	if demoOnce.path != "" {
		os.RemoveAll(filepath.Dir(demoOnce.path))
	}
	os.Exit(code)
}

// chirp is a deterministic test signal: a rising tone with some noise.
func chirp(seconds float64) []float32 {
	n := int(seconds * SampleRate)
	r := rand.New(rand.NewPCG(3, 4))
	pcm := make([]float32, n)
	for i := range pcm {
		tt := float64(i) / SampleRate
		pcm[i] = float32(0.3*math.Sin(2*math.Pi*(200+300*tt)*tt) + 0.01*r.NormFloat64())
	}
	return pcm
}

func TestDemoModel(t *testing.T) {
	path, data := demoModel(t)
	// Deterministic: a second write gives the same bytes.
	again := filepath.Join(t.TempDir(), "again.bin")
	if err := WriteDemoModel(again); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(again)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(b) != sha256.Sum256(data) {
		t.Fatal("WriteDemoModel is not deterministic")
	}
	m, err := Load(path, Options{Threads: 1, Demo: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info := m.Info()
	want := HParams{NVocab: 51864, NAudioCtx: 1500, NAudioState: 64, NAudioHead: 2, NAudioLayer: 4, NTextCtx: 448,
		NTextState: 64, NTextHead: 2, NTextLayer: 4, NMels: 80, FType: 1}
	if info.HParams != want || info.Type != "tiny" || info.Multilingual || info.WeightType != "f16" || info.Bytes <= 0 {
		t.Fatalf("Info() = %+v", info)
	}
	if st := m.Status(); !st.Ready || !st.Demo || st.Name != "stt" || st.Model != path {
		t.Fatalf("Status() = %+v", st)
	}
	tr, err := m.Transcribe(context.Background(), chirp(3), engine.TranscribeOptions{Language: "de"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Language != "en" || tr.Warning != warnEnglishOnly {
		t.Errorf("English-only model asked for de reports language %q, warning %q", tr.Language, tr.Warning)
	}
	if st := m.Status(); !st.EnglishOnly || st.NonEnglishRequests != 1 || !strings.Contains(st.Warning, "English-only: 1 requests") {
		t.Errorf("Status() after a German request = %+v", st)
	}
	if len(tr.Tokens) == 0 || tr.Mel <= 0 || tr.Encoder <= 0 || tr.Decoder <= 0 {
		t.Fatalf("transcript %+v", tr)
	}
	// The text is the concatenation of the tokens' bytes.
	var text strings.Builder
	for _, id := range tr.Tokens {
		if id < 256 {
			text.WriteByte(byte(id))
		} else {
			text.WriteString(" t" + strconv.Itoa(id))
		}
	}
	if tr.Text != text.String() {
		t.Fatalf("text %q does not match tokens %v", tr.Text, tr.Tokens)
	}
	if len(tr.Tokens) > DefaultMaxTokensPerWindow {
		t.Fatalf("%d tokens from one window", len(tr.Tokens))
	}
	// Too short for a window: an empty transcript, not an error.
	short, err := m.Transcribe(context.Background(), chirp(0.05), engine.TranscribeOptions{})
	if err != nil || short.Text != "" || len(short.Tokens) != 0 {
		t.Fatalf("50 ms of audio: %+v, %v", short, err)
	}
	for _, bad := range [][]float32{nil, {0, float32(math.NaN()), 0}} {
		if _, err := m.Transcribe(context.Background(), bad, engine.TranscribeOptions{}); engine.KindOf(err) != engine.KindBadAudio {
			t.Fatalf("bad samples %v: err = %v", bad, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Transcribe(context.Background(), chirp(1), engine.TranscribeOptions{}); engine.KindOf(err) != engine.KindNotReady {
		t.Fatalf("Transcribe after Close: %v", err)
	}
	if m.Status().Ready {
		t.Fatal("closed model reports ready")
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	path, data := demoModel(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Offsets inside the magic, the hparams, the filters, the vocabulary,
	// a tensor header, tensor data, and one byte short of the end.
	cuts := []int{0, 2, 4, 20, 48, 60, 1000, 70000, 80000, 200000, 400000, len(data) / 2, len(data) - 1}
	for _, n := range cuts {
		p := write("cut"+strconv.Itoa(n)+".bin", data[:n])
		_, err := Load(p, Options{Logger: quiet})
		if err == nil {
			t.Errorf("truncated to %d bytes: loaded", n)
			continue
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("truncated to %d bytes: error %q does not name the file", n, err)
		}
	}
	bad := map[string][]byte{
		"garbage": bytes.Repeat([]byte{0x5a}, 4096),
		"magic":   append([]byte{1, 2, 3, 4}, data[4:]...),
	}
	// Hyperparameters that would ask for absurd sizes.
	huge := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(huge[4+4*2:], 1<<30) // n_audio_state
	bad["huge_state"] = huge
	heads := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(heads[4+4*3:], 3) // 64 is not a multiple of 3 heads
	bad["heads"] = heads
	vocab := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(vocab[4+44+8+80*201*4:], 0x7fffffff) // vocabulary count
	bad["vocab"] = vocab
	extra := append(append([]byte(nil), data...), 1, 2, 3)
	bad["trailing"] = extra
	for name, b := range bad {
		p := write(name+".bin", b)
		if _, err := Load(p, Options{Logger: quiet}); err == nil {
			t.Errorf("%s: loaded", name)
		} else if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.bin"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(path, Options{Logger: quiet}); err != nil {
		t.Fatalf("the intact file: %v", err)
	}
}

// FuzzLoad feeds arbitrary bytes to the parser and the model builder: they
// must return an error or a model, never panic or allocate beyond the input.
func FuzzLoad(f *testing.F) {
	_, data := demoModel(f)
	f.Add(data[:100])
	f.Add(data[:4+44+8+16])
	f.Add(data[:4+44+8+80*201*4+40])
	f.Add([]byte("lmgg"))
	// A complete small file: hparams for d=32, a 1-token vocabulary... too
	// large to build by hand, so seed with the demo file's prefix only.
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseGGML(bytes.NewReader(b), int64(len(b)), nil, nil)
		if err != nil {
			if !errors.Is(err, errFormat) {
				t.Fatalf("error %v does not wrap errFormat", err)
			}
			return
		}
		if _, err := newModel(g, Options{Threads: 1, Logger: quiet}); err != nil && !errors.Is(err, errFormat) {
			t.Fatalf("error %v does not wrap errFormat", err)
		}
	})
}

// countdownCtx reports cancellation from its n-th Err call on.
type countdownCtx struct {
	context.Context
	n     int64
	calls atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.calls.Add(1) >= c.n {
		return context.Canceled
	}
	return nil
}

func TestTranscribeCancellation(t *testing.T) {
	m := loadDemo(t, Options{Threads: 1})
	pcm := chirp(2)

	// Canceled in the encoder: Transcribe checks ctx before the first
	// window and between the encoder's steps (encoderStep), so the 3rd
	// check (the encoder's second step) stops it there, within one step
	// of the cancellation (a speculative pass giving way).
	ctx := &countdownCtx{Context: context.Background(), n: 3}
	_, err := m.Transcribe(ctx, pcm, engine.TranscribeOptions{})
	if engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("canceled in the encoder: err = %v", err)
	}
	if got := ctx.calls.Load(); got != 3 {
		t.Fatalf("ctx.Err called %d times; the transcription did not stop at the first canceled check", got)
	}

	// Canceled while decoding: run checks ctx before the first window and
	// before each token, so the 3rd check (2nd token) stops it.
	ctx = &countdownCtx{Context: context.Background(), n: 3}
	if _, err := m.run(ctx, pcm, -1, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled mid-window: err = %v", err)
	}
	if got := ctx.calls.Load(); got != 3 {
		t.Fatalf("ctx.Err called %d times in the decoder; it did not stop at the first canceled check", got)
	}

	// Canceled between windows: 37 s has two windows; count the checks of an
	// uncanceled run and cancel at the second window's check.
	long := chirp(37)
	probe := &countdownCtx{Context: context.Background(), n: math.MaxInt64}
	res, err := m.run(probe, long, -1, 4)
	if err != nil || len(res.windows) != 2 {
		t.Fatalf("run: %v, %d windows", err, len(res.windows))
	}
	firstWindowChecks := 1 + len(res.windows[0].tokens)
	ctx = &countdownCtx{Context: context.Background(), n: int64(firstWindowChecks + 1)}
	if _, err := m.run(ctx, long, -1, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled between windows: err = %v", err)
	}
	if got := ctx.calls.Load(); got != int64(firstWindowChecks+1) {
		t.Fatalf("ctx.Err called %d times, want %d", got, firstWindowChecks+1)
	}

	// Canceled while waiting for another transcription: returns at once.
	m.sem <- struct{}{}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.Transcribe(cctx, pcm, engine.TranscribeOptions{})
	<-m.sem
	if engine.KindOf(err) != engine.KindCanceled {
		t.Fatalf("canceled while queued: err = %v", err)
	}
}

func TestTranscribeConcurrent(t *testing.T) {
	m := loadDemo(t, Options{Threads: 2, MaxTokensPerWindow: 8})
	pcm := chirp(1.5)
	want, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Tokens) == 0 || len(want.Tokens) > 8 {
		t.Fatalf("%d tokens with MaxTokensPerWindow 8", len(want.Tokens))
	}
	transcribeAtOnce(t, []*Model{m}, 4, pcm, want.Text)
}

// transcribeAtOnce runs n transcriptions of pcm at once, the i-th on
// models[i%len(models)], and fails unless each gives want.
func transcribeAtOnce(t *testing.T, models []*Model, n int, pcm []float32, want string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := models[i%len(models)].Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
			if err == nil && got.Text != want {
				err = errors.New("concurrent transcription differs: " + got.Text)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTranscribeTwoModels runs two models at once on a two-window clip with
// two threads each: OpenBLAS's threads are stopped after every window's
// encoder and started again by the next product, from both models.
func TestTranscribeTwoModels(t *testing.T) {
	path, _ := demoModel(t)
	pcm := chirp(35)
	var models []*Model
	var want []string
	for i := 0; i < 2; i++ {
		m, err := Load(path, Options{Threads: 2, MaxTokensPerWindow: 6, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		tr, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		models, want = append(models, m), append(want, tr.Text)
	}
	if want[0] == "" || want[0] != want[1] {
		t.Fatalf("two loads of one model disagree: %q, %q", want[0], want[1])
	}
	transcribeAtOnce(t, models, 6, pcm, want[0])
}

func TestNoSpeechRule(t *testing.T) {
	cfg := DemoConfig()
	cfg.WeightType = "f32"
	m := loadWritten(t, cfg, 8)
	pcm := make([]float32, 2*SampleRate) // digital silence
	tr, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Text == "" {
		t.Fatal("random weights should not trip the no-speech rule")
	}
	// Point the <|nospeech|> output row along the decoder's state at the sot
	// position, so that its probability there is about 1.
	mel := m.logMel(pcm)
	in := make([]float32, m.hp.NMels*windowFrames)
	mel.window(0, in)
	st := mustWindow(t, m, in, 0)
	h := mustDecode(t, m, st, []int{m.tok.sot})
	var norm float64
	for _, v := range h {
		norm += float64(v) * float64(v)
	}
	row := m.tokEmb.f32[m.tok.nosp*m.hp.NTextState : (m.tok.nosp+1)*m.hp.NTextState]
	for i, v := range h {
		row[i] = float32(40 * float64(v) / norm)
	}
	res, err := m.run(context.Background(), pcm, -1, 8)
	if err != nil {
		t.Fatal(err)
	}
	w := res.windows[0]
	if w.noSpeechProb < 0.99 || w.avgLogprob >= -1 || !w.noSpeech {
		t.Fatalf("no_speech_prob %.4g, avg_logprob %.3g, no-speech %v", w.noSpeechProb, w.avgLogprob, w.noSpeech)
	}
	tr, err = m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Text != "" || len(tr.Tokens) != 0 {
		t.Fatalf("no-speech window produced %q %v", tr.Text, tr.Tokens)
	}
}

func TestMultilingual(t *testing.T) {
	cfg := DemoConfig()
	cfg.NVocab = 51865
	cfg.Seed = 5
	m := loadWritten(t, cfg, 4)
	if !m.Info().Multilingual || m.Info().Languages != 99 || m.tok.eot != 50257 || m.tok.transcribe != 50359 || m.tok.not != 50363 {
		t.Fatalf("multilingual tokens: %+v %+v", m.Info(), m.tok)
	}
	pcm := chirp(2)
	res, err := m.run(context.Background(), pcm, langID("de-AT"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{50258, 50258 + 1 + 2, 50359, 50363}; !slices.Equal(res.windows[0].prompt, want) {
		t.Fatalf("prompt %v, want %v", res.windows[0].prompt, want)
	}
	res, err = m.run(context.Background(), pcm, -1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.langProbs) != 100 || res.lang < 0 || res.windows[0].prompt[1] != 50259+res.lang {
		t.Fatalf("detected %d, prompt %v", res.lang, res.windows[0].prompt)
	}
	for i, p := range res.langProbs {
		if p > res.langProbs[res.lang] {
			t.Fatalf("detected %d, but id %d is more probable", res.lang, i)
		}
	}
	tr, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Language != langCodes[res.lang] || tr.Warning != "" {
		t.Fatalf("language %q (warning %q), detection says %q", tr.Language, tr.Warning, langCodes[res.lang])
	}
	// A language the model knows is used as it is; one it does not know
	// is detected, and the transcript says so.
	for code, want := range map[string]langWant{"de-AT": {"de", ""}, "gsw": {langCodes[res.lang], warnUnknownLanguage}} {
		tr, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{Language: code})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Language != want.lang || tr.Warning != want.warning {
			t.Errorf("asked for %s: language %q, warning %q; want %q, %q", code, tr.Language, tr.Warning, want.lang, want.warning)
		}
	}
	if st := m.Status(); st.EnglishOnly || st.NonEnglishRequests != 0 || st.Warning != "" {
		t.Errorf("Status() = %+v", st)
	}
}

// langWant is a transcription's language and warning in a test table.
type langWant struct{ lang, warning string }

// TestLargeV3Vocabulary: a model with large-v3's vocabulary (n_vocab 51866,
// 100 languages, <|yue|> the last) and its 128 mel bands, as
// LargeV3TurboConfig writes it, loads with the special tokens moved up by
// one more language and detects among all 100 languages.
func TestLargeV3Vocabulary(t *testing.T) {
	cfg := DemoConfig()
	cfg.NVocab, cfg.NMels, cfg.Seed = 51866, 128, 6
	m := loadWritten(t, cfg, 4)
	if info := m.Info(); !info.Multilingual || info.Languages != 100 || m.tok.sot != 50258 || m.tok.transcribe != 50360 || m.tok.not != 50364 {
		t.Fatalf("large-v3 tokens: %+v %+v", info, m.tok)
	}
	if want := LargeV3TurboConfig("q8_0"); want.NVocab != cfg.NVocab || want.NMels != cfg.NMels {
		t.Fatalf("LargeV3TurboConfig has n_vocab %d, n_mels %d", want.NVocab, want.NMels)
	}
	res, err := m.run(context.Background(), chirp(2), -1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.langProbs) != 100 || res.windows[0].prompt[1] != 50259+res.lang {
		t.Fatalf("detected %d, prompt %v", res.lang, res.windows[0].prompt)
	}
	tr, err := m.Transcribe(context.Background(), chirp(2), engine.TranscribeOptions{Language: "yue"})
	if err != nil || tr.Language != "yue" {
		t.Fatalf("asked for yue: %q, %v", tr.Language, err)
	}
}

// TestTranscribeGrows: a transcription that starts on fewer threads than
// the model's setting asks TranscribeOptions.Grow between the encoder's
// steps (its start, the second convolution, each layer's attention and MLP,
// each later layer's start), runs what it is lent from the next step on,
// gives it back once the encoder is done, and decodes on its own threads.
func TestTranscribeGrows(t *testing.T) {
	m := loadDemo(t, Options{Threads: 2, MaxTokensPerWindow: 8})
	pcm := chirp(1.5)
	var asked, ran []int
	lend := 1
	grow := func(most int) int {
		asked = append(asked, most)
		ran = append(ran, m.threads)
		return min(lend, most)
	}
	steps := 3*m.hp.NAudioLayer + 1
	// Lent nothing: every step runs on its own 1 thread.
	if _, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{Threads: 1, Grow: grow}); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Repeat([]int{2}, steps), 1)
	if !slices.Equal(asked, want) {
		t.Fatalf("Grow asked %v, want %v", asked, want)
	}
	if slices.Max(ran) != 1 {
		t.Fatalf("threads when asked %v, want 1 throughout", ran)
	}
	// Lent a core: the first step runs on 1, every later encoder step on
	// 2, and the words are those of the model's own 2 threads.
	asked, ran, lend = nil, nil, 2
	lent, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{Threads: 1, Grow: grow})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, want) {
		t.Fatalf("Grow asked %v, want %v", asked, want)
	}
	if ran[0] != 1 || slices.Min(ran[1:steps]) != 2 {
		t.Fatalf("threads when asked %v, want 1 then 2", ran)
	}
	if m.threads != 1 {
		t.Fatalf("decoded on %d threads, want its own 1", m.threads)
	}
	own, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lent.Text != own.Text {
		t.Errorf("lent cores: %q, on its own 2 threads: %q", lent.Text, own.Text)
	}
	if m.threads != 2 || m.grow != nil {
		t.Fatalf("after the transcriptions: %d threads, grow set %v; want the model's 2 and none", m.threads, m.grow != nil)
	}
	// A model on one thread has nothing to grow into.
	one := loadDemo(t, Options{Threads: 1, MaxTokensPerWindow: 8})
	if _, err := one.Transcribe(context.Background(), pcm, engine.TranscribeOptions{Threads: 1, Grow: func(int) int { t.Error("Grow called on a 1-thread model"); return 1 }}); err != nil {
		t.Fatal(err)
	}
}

// loadDemo loads the demo model (demoModel) with opts, quiet, and closes it
// when t ends.
func loadDemo(t *testing.T, opts Options) *Model {
	t.Helper()
	path, _ := demoModel(t)
	opts.Logger = quiet
	m, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// loadWritten writes the random-weight model cfg describes into a temporary
// file and loads it on one thread with maxTokens a window; the test's end
// closes it.
func loadWritten(t *testing.T, cfg ModelConfig, maxTokens int) *Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.bin")
	if err := WriteModel(path, cfg); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path, Options{Threads: 1, MaxTokensPerWindow: maxTokens, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
