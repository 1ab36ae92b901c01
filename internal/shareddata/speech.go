package shareddata

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The VAD's weights and its ONNX Runtime reference are installed by
// scripts/deps.sh (models/silero_vad_v5.onnx, tests/vadref/node_modules);
// test speech is made with espeak-ng and sox, which deps.sh installs too.
// Where one is missing, as in a stranger's fresh clone, the tests that need
// it skip loudly; with REPLYD_REQUIRE_TESTDATA=1 (set by .ci/run) they fail.

func missing(tb testing.TB, what string) {
	tb.Helper()
	msg := what + " NOT FOUND: run scripts/deps.sh; the tests that need it are NOT running"
	if os.Getenv("REPLYD_REQUIRE_TESTDATA") == "1" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// ModuleRoot returns the directory holding go.mod.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	wd, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			tb.Fatal("no go.mod above " + wd)
		}
	}
}

// VADModel returns the path of Silero VAD v5's weights: $REPLYD_VAD_MODEL,
// else models/silero_vad_v5.onnx in the module.
func VADModel(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv("REPLYD_VAD_MODEL")
	if p == "" {
		p = filepath.Join(ModuleRoot(tb), "models", "silero_vad_v5.onnx")
	}
	if _, err := os.Stat(p); err != nil {
		missing(tb, "SILERO VAD WEIGHTS ("+p+")")
	}
	return p
}

// VADReference returns node's path and the script (tests/vadref/ref.js)
// that computes ONNX Runtime's speech probabilities.
func VADReference(tb testing.TB) (node, script string) {
	tb.Helper()
	dir := filepath.Join(ModuleRoot(tb), "tests", "vadref")
	node, err := exec.LookPath("node")
	if err != nil {
		missing(tb, "NODE.JS (for the ONNX Runtime reference)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "onnxruntime-node")); err != nil {
		missing(tb, "ONNX RUNTIME (tests/vadref/node_modules/onnxruntime-node)")
	}
	return node, filepath.Join(dir, "ref.js")
}

// Speak returns text spoken by espeak-ng's voice at 16 kHz, mono, with
// lead and tail seconds of digital silence around it and, when noise > 0,
// white noise of that amplitude mixed in by sox over the whole clip.
func Speak(tb testing.TB, text, voice string, lead, tail, noise float64) []float32 {
	tb.Helper()
	for _, tool := range []string{"espeak-ng", "sox"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tb, strings.ToUpper(tool))
		}
	}
	dir := tb.TempDir()
	raw := filepath.Join(dir, "espeak.wav")
	run(tb, "espeak-ng", "-v", voice, "-s", "150", "-w", raw, text)
	clip := filepath.Join(dir, "clip.wav")
	run(tb, "sox", raw, "-r", "16000", "-c", "1", "-b", "16", clip, "pad", ftoa(lead), ftoa(tail))
	if noise > 0 {
		noisy := filepath.Join(dir, "noisy.wav")
		nz := filepath.Join(dir, "noise.wav")
		out, err := exec.Command("soxi", "-D", clip).Output()
		if err != nil {
			tb.Fatal(err)
		}
		run(tb, "sox", "-R", "-n", "-r", "16000", "-c", "1", "-b", "16", nz, "synth", strings.TrimSpace(string(out)),
			"whitenoise", "vol", ftoa(noise))
		run(tb, "sox", "-R", "-m", clip, nz, noisy)
		clip = noisy
	}
	f32 := filepath.Join(dir, "clip.f32")
	run(tb, "sox", clip, "-t", "raw", "-e", "float", "-b", "32", "-L", f32)
	b, err := os.ReadFile(f32)
	if err != nil {
		tb.Fatal(err)
	}
	pcm := make([]float32, len(b)/4)
	for i := range pcm {
		pcm[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return pcm
}

func run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// QwenTokenizer returns the path of Qwen's tokenizer.json, which
// scripts/qwen-tokenizer.sh (run by scripts/deps.sh test) fetches:
// $REPLYD_QWEN_TOKENIZER, else models/qwen-tokenizer.json in the module.
// Without it the test skips loudly; with REPLYD_REQUIRE_TOOLS=1 (make test)
// or REPLYD_REQUIRE_TESTDATA=1 (.ci/run) it fails.
func QwenTokenizer(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv("REPLYD_QWEN_TOKENIZER")
	if p == "" {
		p = filepath.Join(ModuleRoot(tb), "models", "qwen-tokenizer.json")
	}
	if _, err := os.Stat(p); err != nil {
		msg := "QWEN TOKENIZER (" + p + ") NOT FOUND: run scripts/qwen-tokenizer.sh; the tests of the real byte-level BPE vocabulary are NOT running"
		if os.Getenv("REPLYD_REQUIRE_TOOLS") == "1" || os.Getenv("REPLYD_REQUIRE_TESTDATA") == "1" {
			tb.Fatal(msg)
		}
		logSkip(tb.Name())
		tb.Skip(msg)
	}
	return p
}
