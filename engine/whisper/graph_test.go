package whisper

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/shareddata"
)

// TestGraphMatchesBLAS runs the two compute paths against each other on
// the conformance models and clips: one model file, one control loop. The
// F32 and F16 files give the same tokens and encoder outputs within 0.1%
// of their largest value (the ggml path's softmax probabilities meet V as
// halves, as in whisper.cpp). On quantised files ggml quantises the
// activations to q8_0 before each product, as whisper.cpp does, where the
// BLAS path multiplies them as float32 by the dequantised weights: the
// random-weight models' near ties then differ at a few steps, so the test
// asks what the conformance data's quantised class asks of whisper.cpp's
// own numbers (README §6): encoder within 2%, 90% of the tokens the same.
func TestGraphMatchesBLAS(t *testing.T) {
	dir := shareddata.Whisper(t)
	models, err := filepath.Glob(filepath.Join(dir, "models", "*.bin"))
	if err != nil || len(models) == 0 {
		t.Fatalf("no conformance models in %s (%v)", dir, err)
	}
	clips, err := filepath.Glob(filepath.Join(dir, "audio", "*.wav"))
	if err != nil || len(clips) == 0 {
		t.Fatalf("no conformance clips in %s (%v)", dir, err)
	}
	for _, path := range models {
		t.Run(filepath.Base(path), func(t *testing.T) {
			load := func(compute string) *Model {
				m, err := Load(path, Options{Threads: 1, MaxTokensPerWindow: 32, NoFallback: true, Compute: compute})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			blas, gg := load(ComputeBLAS), load(ComputeGGMLCPU)
			encTol, tokAgree := 1e-3, 1.0
			if blas.wtype.Quantized() {
				encTol, tokAgree = 0.02, 0.9
			}
			if blas.gg != nil || gg.gg == nil {
				t.Fatal("the compute paths were not the ones asked for")
			}
			for _, clip := range clips {
				pcm := readWAV(t, clip)
				input := make([]float32, blas.hp.NMels*windowFrames)
				blas.logMel(pcm).window(0, input)
				a := encoded(t, blas, input, 0)
				b := encoded(t, gg, input, 0)
				var worst, scale float64
				for i := range a {
					worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
					scale = math.Max(scale, math.Abs(float64(a[i])))
				}
				if worst > encTol*scale {
					t.Errorf("%s: encoder outputs differ by up to %g (largest value %g)", filepath.Base(clip), worst, scale)
				}
				opts := engine.TranscribeOptions{}
				ta, err := blas.Transcribe(context.Background(), pcm, opts)
				if err != nil {
					t.Fatal(err)
				}
				tb, err := gg.Transcribe(context.Background(), pcm, opts)
				if err != nil {
					t.Fatal(err)
				}
				same := 0
				for i := range min(len(ta.Tokens), len(tb.Tokens)) {
					if ta.Tokens[i] == tb.Tokens[i] {
						same++
					}
				}
				if len(ta.Tokens) != len(tb.Tokens) || float64(same) < tokAgree*float64(len(ta.Tokens)) {
					t.Errorf("%s: tokens differ:\nblas %v\nggml %v", filepath.Base(clip), ta.Tokens, tb.Tokens)
				}
			}
		})
	}
}

// TestGraphCanceled checks that a canceled context stops the ggml path's
// encoder between its steps, as it stops the BLAS path's.
func TestGraphCanceled(t *testing.T) {
	dir := shareddata.Whisper(t)
	m, err := Load(filepath.Join(dir, "models", "rand-w64-en-q8_0.bin"), Options{Threads: 1, Compute: ComputeGGMLCPU})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	steps := 0
	opts := engine.TranscribeOptions{Threads: 1, Grow: func(most int) int {
		if steps++; steps == 2 {
			cancel()
		}
		return 1
	}}
	// Grow is asked only when the model may grow: give it room.
	m.maxThreads = 2
	_, err = m.Transcribe(ctx, make([]float32, 16000), opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Transcribe = %v, want context.Canceled", err)
	}
	if steps != 2 {
		t.Errorf("the encoder went on for %d steps after the cancel", steps-2)
	}
}

// TestPrototypesMatchGGMLH compares the ggml prototypes declared by hand in
// ggmlapi.h with the headers of the ggml vendored by the ollama module in
// go.mod (enums passed as int, typedefs resolved): C links by name only, so
// a changed signature would otherwise break at run time.
func TestPrototypesMatchGGMLH(t *testing.T) {
	ours, err := os.ReadFile("ggmlapi.h")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("locating the ollama module: %v", err)
	}
	inc := filepath.Join(strings.TrimSpace(string(out)), "ml", "backend", "ggml", "ggml", "include")
	var headers string
	for _, h := range []string{"ggml.h", "ggml-alloc.h", "ggml-backend.h", "ggml-cpu.h"} {
		b, err := os.ReadFile(filepath.Join(inc, h))
		if err != nil {
			t.Fatal(err)
		}
		headers += string(b) + "\n"
	}
	decl := regexp.MustCompile(`(?s)(?:^|\n)\s*(?:GGML_API\s+|GGML_BACKEND_API\s+)?([A-Za-z_][\w\s*]*?)\s*\b(ggml_\w+)\s*\(([^;{]*?)\)\s*;`)
	mine := map[string][2]string{}
	for _, m := range decl.FindAllStringSubmatch(string(ours), -1) {
		mine[m[2]] = [2]string{m[1], m[3]}
	}
	if len(mine) < 58 {
		t.Fatalf("found %d prototypes in ggmlapi.h, want the 58 it declares", len(mine))
	}
	theirs := map[string][2]string{}
	for _, m := range decl.FindAllStringSubmatch(headers, -1) {
		if strings.Contains(m[0], "_API") {
			theirs[m[2]] = [2]string{m[1], m[3]}
		}
	}
	for name, o := range mine {
		h, ok := theirs[name]
		if !ok {
			t.Errorf("%s: not declared in ggml's headers any more", name)
			continue
		}
		if got, want := cDeclType(o[0]), cDeclType(h[0]); got != want {
			t.Errorf("%s returns %q in ggmlapi.h, %q in ggml's headers", name, got, want)
		}
		if got, want := ggmlParams(o[1]), ggmlParams(h[1]); got != want {
			t.Errorf("%s takes (%s) in ggmlapi.h, (%s) in ggml's headers", name, got, want)
		}
	}
	// struct ggml_init_params is laid out as ggmlapi.h declares it.
	if !regexp.MustCompile(`struct ggml_init_params \{[^}]*size_t\s+mem_size;[^}]*void\s*\*\s*mem_buffer;[^}]*bool\s+no_alloc;[^}]*\}`).MatchString(headers) {
		t.Error("ggml.h's struct ggml_init_params is no longer {mem_size, mem_buffer, no_alloc}")
	}
}

// ggmlAliases resolve the typedefs and enums of ggml's headers to what
// ggmlapi.h spells out.
var ggmlAliases = map[string]string{
	"ggml_backend_t":             "struct ggml_backend *",
	"ggml_backend_buffer_t":      "struct ggml_backend_buffer *",
	"ggml_backend_buffer_type_t": "struct ggml_backend_buffer_type *",
	"ggml_gallocr_t":             "struct ggml_gallocr *",
	"ggml_backend_dev_t":         "struct ggml_backend_device *",
	"ggml_abort_callback":        "rdg_abort_callback",
	"enum ggml_type":             "int",
	"enum ggml_status":           "int",
	"enum ggml_backend_dev_type": "int",
}

func cDeclType(s string) string {
	s = strings.Join(strings.Fields(strings.NewReplacer("*", " * ").Replace(s)), " ")
	for k, v := range ggmlAliases {
		s = regexp.MustCompile(`\b`+regexp.QuoteMeta(k)+`\b`).ReplaceAllString(s, v)
	}
	return strings.Join(strings.Fields(strings.NewReplacer("*", " * ").Replace(s)), " ")
}

func ggmlParams(list string) string {
	var out []string
	for _, p := range strings.Split(regexp.MustCompile(`//[^\n]*`).ReplaceAllString(list, ""), ",") {
		f := strings.Fields(strings.NewReplacer("*", " * ").Replace(p))
		if len(f) > 1 && f[len(f)-1] != "*" && f[len(f)-1] != "void" {
			f = f[:len(f)-1]
		}
		out = append(out, cDeclType(strings.Join(f, " ")))
	}
	return strings.Join(out, ", ")
}
