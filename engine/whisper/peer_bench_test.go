package whisper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/replyd/replyd/internal/testaudio"
)

// whisper.cpp beside BenchmarkComputePaths: with REPLYD_BENCH_WHISPER_CPP
// set to the bin folder of a whisper.cpp build (../shared/peers/README.md:
// whisper-cli and whisper-bench), each op of a row also runs whisper-cli
// on the same model file and clip (greedy as replyd's: -bs 1 -bo 1 -nt
// -nf, -t threads), and each shape, type and thread count runs
// whisper-bench once, whose 256 single-token decodes give the decoder's
// time per token. The figures are whisper.cpp's own stage timings
// (whisper_print_timings).

// peerTimings are the stage times whisper_print_timings prints, in ms.
type peerTimings struct {
	load, mel, encode, decode, batchd, prompt, total float64
	decodeRuns, sampleRuns                           int
}

var peerLine = regexp.MustCompile(`whisper_print_timings:\s+(\w+) time =\s+([\d.]+) ms(?: /\s+(\d+) runs)?`)

// parsePeerTimings reads whisper_print_timings' lines from out.
func parsePeerTimings(out []byte) (peerTimings, error) {
	var p peerTimings
	n := 0
	for _, m := range peerLine.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		runs, _ := strconv.Atoi(string(m[3]))
		n++
		switch string(m[1]) {
		case "load":
			p.load = v
		case "mel":
			p.mel = v
		case "sample":
			p.sampleRuns = runs
		case "encode":
			p.encode = v
		case "decode":
			p.decode, p.decodeRuns = v, runs
		case "batchd":
			p.batchd = v
		case "prompt":
			p.prompt = v
		case "total":
			p.total = v
		}
	}
	if n < 5 || p.total == 0 {
		return p, fmt.Errorf("no whisper_print_timings in the output:\n%s", out)
	}
	return p, nil
}

// peer runs whisper.cpp's programs for the benchmark; nil when
// REPLYD_BENCH_WHISPER_CPP is not set.
type peer struct{ bin, dir string }

func newPeer(b *testing.B) *peer {
	bin := os.Getenv("REPLYD_BENCH_WHISPER_CPP")
	if bin == "" {
		return nil
	}
	for _, p := range []string{"whisper-cli", "whisper-bench"} {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			b.Fatalf("REPLYD_BENCH_WHISPER_CPP: %v", err)
		}
	}
	return &peer{bin: bin, dir: b.TempDir()}
}

// wav writes pcm as a 16-bit WAV for whisper-cli and returns its path.
func (p *peer) wav(b *testing.B, name string, pcm []float32) string {
	path := filepath.Join(p.dir, name+".wav")
	if err := os.WriteFile(path, testaudio.Mono16(SampleRate, pcm), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// run runs one of whisper.cpp's programs and returns its timings.
func (p *peer) run(b *testing.B, prog string, args ...string) peerTimings {
	out, err := exec.Command(filepath.Join(p.bin, prog), args...).CombinedOutput()
	if err != nil {
		b.Fatalf("%s %v: %v\n%s", prog, args, err, out)
	}
	t, err := parsePeerTimings(out)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// transcribe runs whisper-cli on a clip: greedy, no fallback, no
// timestamps, as replyd's conformance runs.
func (p *peer) transcribe(b *testing.B, model, wav string, threads int) peerTimings {
	return p.run(b, "whisper-cli", "-m", model, "-f", wav, "-t", strconv.Itoa(threads), "-bs", "1", "-bo", "1", "-nt", "-nf")
}

// decoderPerToken runs whisper-bench (-w 0: encoder, 256 single-token
// decodes, batches) and returns its decode time per run.
func (p *peer) decoderPerToken(b *testing.B, model string, threads int) float64 {
	t := p.run(b, "whisper-bench", "-m", model, "-t", strconv.Itoa(threads), "-w", "0")
	return t.decode / float64(max(t.decodeRuns, 1))
}

// TestParsePeerTimings reads whisper_print_timings' lines as whisper-cli at
// the peers README's commit prints them.
func TestParsePeerTimings(t *testing.T) {
	out := []byte(` t25465
whisper_print_timings:     load time =   898.01 ms
whisper_print_timings:     fallbacks =   0 p /   0 h
whisper_print_timings:      mel time =    80.23 ms
whisper_print_timings:   sample time =     3.25 ms /     1 runs (     3.25 ms per run)
whisper_print_timings:   encode time =  3887.19 ms /     1 runs (  3887.19 ms per run)
whisper_print_timings:   decode time =    10.48 ms /     1 runs (    10.48 ms per run)
whisper_print_timings:   batchd time =   236.62 ms /     2 runs (   118.31 ms per run)
whisper_print_timings:   prompt time =     0.00 ms /     1 runs (     0.00 ms per run)
whisper_print_timings:    total time =  5360.76 ms
`)
	p, err := parsePeerTimings(out)
	if err != nil {
		t.Fatal(err)
	}
	want := peerTimings{load: 898.01, mel: 80.23, encode: 3887.19, decode: 10.48, batchd: 236.62, total: 5360.76, decodeRuns: 1, sampleRuns: 1}
	if p != want {
		t.Errorf("parsed %+v, want %+v", p, want)
	}
	if _, err := parsePeerTimings([]byte("error: failed to open model\n")); err == nil {
		t.Error("no timings parsed without an error")
	}
}
