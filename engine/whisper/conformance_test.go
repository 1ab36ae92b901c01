//go:build !race

package whisper

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/shareddata"
)

// The conformance tests check this package against whisper.cpp's numbers in
// the shared test data (see its README: criteria M1–M3, F1–F4, G1–G6,
// L1–L2). They need no whisper.cpp.

type refManifest struct {
	Models []struct {
		File         string  `json:"file"`
		WeightType   string  `json:"weight_type"`
		HParams      HParams `json:"hparams"`
		Multilingual bool    `json:"multilingual"`
		Special      struct {
			EOT, SOT, Translate, Transcribe, Solm, Prev, Nosp, Not, Beg int
		} `json:"special_tokens"`
		SpaceToken int `json:"space_token"`
	} `json:"models"`
	Audio []struct {
		File string `json:"file"`
	} `json:"audio"`
	Languages []string `json:"language_codes_by_id"`
}

type refStep struct {
	Top5   [][2]float64 `json:"top5"`
	Mean   float64      `json:"mean"`
	Std    float64      `json:"std"`
	Probes []float64    `json:"probes"`
}

type refClip struct {
	Model    string `json:"model"`
	Audio    string `json:"audio"`
	NSamples int    `json:"n_samples"`
	Mel      struct {
		NMel        int       `json:"n_mel"`
		NLen        int       `json:"n_len"`
		NLenOrg     int       `json:"n_len_org"`
		Mean        float64   `json:"mean"`
		Std         float64   `json:"std"`
		Min         float64   `json:"min"`
		Max         float64   `json:"max"`
		RowMeans    []float64 `json:"row_means"`
		WindowMeans []float64 `json:"window_means"`
		FullMelFile string    `json:"full_mel_file"`
	} `json:"mel"`
	Forced struct {
		Prompt   []int `json:"prompt"`
		Tokens   []int `json:"tokens"`
		ProbeIDs []int `json:"probe_ids"`
		Windows  []struct {
			Seek  int       `json:"seek"`
			Steps []refStep `json:"steps"`
		} `json:"windows"`
	} `json:"forced"`
	Greedy struct {
		Windows []struct {
			Seek       int          `json:"seek"`
			Prompt     []int        `json:"prompt"`
			Tokens     []int        `json:"tokens"`
			AvgLogprob float64      `json:"avg_logprob"`
			NoSpeech   float64      `json:"no_speech_prob_at_sot"`
			TextHex    string       `json:"text_hex"`
			Steps      [][4]float64 `json:"steps"`
		} `json:"windows"`
	} `json:"greedy"`
	LanguageDetection *struct {
		LangID int       `json:"lang_id"`
		Probs  []float64 `json:"probs"`
	} `json:"language_detection"`
}

// tolerances of one precision class (README §6).
type tolerances struct {
	quantised  bool
	tau, m     float64
	top1, top5 float64 // minimum agreement fractions over a model
	minTop5    int     // reference top-5 ids that every step must recover
	g5, g6, l1 float64
}

func tolerancesFor(weightType string) tolerances {
	switch weightType {
	case "f32", "f16":
		return tolerances{tau: 0.01, m: 0.02, top1: 0.97, top5: 0.99, minTop5: 4, g5: 0.005, g6: 0.02, l1: 0.01}
	}
	return tolerances{quantised: true, tau: 0.15, m: 0.10, top1: 0.90, top5: 0.95, minTop5: 3, g5: 0.03, g6: 0.2, l1: 0.05}
}

type confData struct {
	dir      string
	manifest refManifest
}

func loadConf(t *testing.T) *confData {
	t.Helper()
	dir := shareddata.Whisper(t)
	c := &confData{dir: dir}
	readJSON(t, filepath.Join(dir, "reference", "manifest.json"), &c.manifest)
	if len(c.manifest.Models) == 0 || len(c.manifest.Audio) == 0 {
		t.Fatal("manifest lists no models or no audio")
	}
	// Every model file in models/ must be in the manifest, so none is skipped.
	files, err := filepath.Glob(filepath.Join(dir, "models", "*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(c.manifest.Models) {
		t.Fatalf("models/ holds %d files, the manifest lists %d", len(files), len(c.manifest.Models))
	}
	return c
}

func (c *confData) clip(t *testing.T, model, audio string) *refClip {
	t.Helper()
	var r refClip
	readJSON(t, filepath.Join(c.dir, "reference", strings.TrimSuffix(model, ".bin"), strings.TrimSuffix(audio, ".wav")+".json"), &r)
	return &r
}

func (c *confData) load(t *testing.T, file string) *Model {
	t.Helper()
	m, err := Load(filepath.Join(c.dir, "models", file), Options{Threads: 1, MaxTokensPerWindow: 32, Compute: confCompute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// confCompute is the compute path the conformance tests load models with
// (TestConformanceGGML runs them again on the ggml graphs).
var confCompute = ComputeBLAS

// TestConformanceGGML runs the decoder conformance tests on the ggml path
// (graph.go, on ggml's CPU backend): the same criteria, the same control
// loop, the other compute path.
func TestConformanceGGML(t *testing.T) {
	confCompute = ComputeGGMLCPU
	defer func() { confCompute = ComputeBLAS }()
	t.Run("Forced", TestConformanceForced)
	t.Run("Greedy", TestConformanceGreedy)
	t.Run("Language", TestConformanceLanguage)
	t.Run("AudioCtx", TestConformanceAudioCtx)
}

func TestConformanceMel(t *testing.T) {
	c := loadConf(t)
	m := c.load(t, c.manifest.Models[0].File)
	var worstSummary, worstFull float64
	for _, a := range c.manifest.Audio {
		ref := c.clip(t, c.manifest.Models[0].File, a.File)
		pcm := readWAV(t, filepath.Join(c.dir, "audio", a.File))
		if len(pcm) != ref.NSamples {
			t.Fatalf("%s: %d samples, reference %d", a.File, len(pcm), ref.NSamples)
		}
		mel := m.logMel(pcm)
		// M1
		if mel.nMel != ref.Mel.NMel || mel.nLen != ref.Mel.NLen || mel.nLenOrg != ref.Mel.NLenOrg {
			t.Errorf("M1 %s: n_mel, n_len, n_len_org = %d, %d, %d; reference %d, %d, %d", a.File,
				mel.nMel, mel.nLen, mel.nLenOrg, ref.Mel.NMel, ref.Mel.NLen, ref.Mel.NLenOrg)
			continue
		}
		// M3
		var sum, sq float64
		mn, mx := math.Inf(1), math.Inf(-1)
		for _, v := range mel.data {
			sum += float64(v)
			mn, mx = math.Min(mn, float64(v)), math.Max(mx, float64(v))
		}
		mean := sum / float64(len(mel.data))
		for _, v := range mel.data {
			sq += (float64(v) - mean) * (float64(v) - mean)
		}
		std := math.Sqrt(sq / float64(len(mel.data)))
		check := func(what string, got, want float64) {
			d := math.Abs(got - want)
			worstSummary = math.Max(worstSummary, d)
			if d > 1e-4 {
				t.Errorf("M3 %s: %s = %.6g, reference %.6g", a.File, what, got, want)
			}
		}
		check("mean", mean, ref.Mel.Mean)
		check("std", std, ref.Mel.Std)
		check("min", mn, ref.Mel.Min)
		check("max", mx, ref.Mel.Max)
		if len(ref.Mel.RowMeans) != mel.nMel {
			t.Fatalf("%s: %d row means", a.File, len(ref.Mel.RowMeans))
		}
		for j, want := range ref.Mel.RowMeans {
			var s float64
			for _, v := range mel.data[j*mel.nLen : (j+1)*mel.nLen] {
				s += float64(v)
			}
			check(fmt.Sprintf("row_means[%d]", j), s/float64(mel.nLen), want)
		}
		win := make([]float32, mel.nMel*windowFrames)
		for k, want := range ref.Mel.WindowMeans {
			mel.window(k*windowFrames, win)
			var s float64
			for _, v := range win {
				s += float64(v)
			}
			check(fmt.Sprintf("window_means[%d]", k), s/float64(len(win)), want)
		}
		// M2: whichever model's JSON names the full mel of this clip.
		full := ""
		for _, mi := range c.manifest.Models {
			if r := c.clip(t, mi.File, a.File); r.Mel.FullMelFile != "" {
				full = r.Mel.FullMelFile
			}
		}
		if full != "" {
			b, err := os.ReadFile(filepath.Join(c.dir, "reference", full))
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != 4*len(mel.data) {
				t.Fatalf("M2 %s: full mel has %d bytes, want %d", a.File, len(b), 4*len(mel.data))
			}
			for i, v := range mel.data {
				d := math.Abs(float64(v) - float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))))
				worstFull = math.Max(worstFull, d)
			}
			if worstFull > 5e-4 {
				t.Errorf("M2 %s: full mel max |Δ| = %.3g > 5e-4", a.File, worstFull)
			}
		}
	}
	if worstFull == 0 {
		t.Error("M2: no clip has a full mel file; the reference data is incomplete")
	}
	t.Logf("mel: full-mel max |Δ| %.2g (README 3.7e-5), summary values within %.2g (README 3.1e-6)", worstFull, worstSummary)
}

// topK returns the ids of the k largest logits, highest first (lower id on ties).
func topK(lg []float32, k int) []int {
	ids := make([]int, 0, k+1)
	for id, v := range lg {
		if len(ids) == k && v <= lg[ids[k-1]] {
			continue
		}
		pos := sort.Search(len(ids), func(i int) bool { return lg[ids[i]] < v })
		ids = append(ids, 0)
		copy(ids[pos+1:], ids[pos:])
		ids[pos] = id
		if len(ids) > k {
			ids = ids[:k]
		}
	}
	return ids
}

// forcedCheck applies F1–F4 to forced steps and keeps one model's totals.
type forcedCheck struct {
	tol                                tolerances
	probeIDs                           []int
	worstF1, worstF2                   float64
	steps, top1Agree, top5Got, top5All int
	worstTop5                          int
}

func newForcedCheck(tol tolerances, probeIDs []int) *forcedCheck {
	return &forcedCheck{tol: tol, probeIDs: probeIDs, worstTop5: 5}
}

// step compares our logits lg with the reference step rs.
func (c *forcedCheck) step(t *testing.T, where string, lg []float32, rs refStep) {
	t.Helper()
	tol, sigma := c.tol, rs.Std
	// F1 over the recorded ids.
	worst := 0.0
	for i, id := range c.probeIDs {
		worst = math.Max(worst, math.Abs(float64(lg[id])-rs.Probes[i]))
	}
	for _, p := range rs.Top5 {
		worst = math.Max(worst, math.Abs(float64(lg[int(p[0])])-p[1]))
	}
	c.worstF1 = math.Max(c.worstF1, worst/sigma)
	if worst > tol.tau*sigma {
		t.Errorf("F1 %s: max |Δlogit| = %.4g σ > %.3g σ", where, worst/sigma, tol.tau)
	}
	// F2
	mean, std := meanStd(lg)
	dm, ds := math.Abs(mean-rs.Mean), math.Abs(std-rs.Std)
	c.worstF2 = math.Max(c.worstF2, math.Max(dm, ds)/sigma)
	if dm > tol.tau*sigma/5 || ds > tol.tau*sigma/5 {
		t.Errorf("F2 %s: |Δmean| = %.3g σ, |Δstd| = %.3g σ > %.3g σ", where, dm/sigma, ds/sigma, tol.tau/5)
	}
	// F3 and F4
	mine := topK(lg, 5)
	c.steps++
	if mine[0] == int(rs.Top5[0][0]) {
		c.top1Agree++
	} else if rs.Top5[0][1]-rs.Top5[1][1] >= tol.m*sigma {
		t.Errorf("F3 %s: argmax %d, reference %d with margin %.3g σ", where, mine[0], int(rs.Top5[0][0]),
			(rs.Top5[0][1]-rs.Top5[1][1])/sigma)
	}
	got := 0
	for _, p := range rs.Top5 {
		for _, id := range mine {
			if id == int(p[0]) {
				got++
			}
		}
	}
	c.top5Got += got
	c.top5All += len(rs.Top5)
	c.worstTop5 = min(c.worstTop5, got)
	if got < tol.minTop5 {
		t.Errorf("F4 %s: %d of the reference top-5 in our top-5, want ≥ %d", where, got, tol.minTop5)
	}
}

// window feeds prompt then tokens on st (a window just encoded) and checks
// each of steps (len(tokens)+1 of them).
func (c *forcedCheck) window(t *testing.T, m *Model, st *decState, where string, prompt, tokens []int, steps []refStep) {
	t.Helper()
	if len(steps) != len(tokens)+1 {
		t.Fatalf("%s: %d steps for %d tokens", where, len(steps), len(tokens))
	}
	hidden := mustDecode(t, m, st, prompt)
	lg := mustLogits(t, m, hidden[(len(prompt)-1)*m.hp.NTextState:])
	for k, rs := range steps {
		c.step(t, fmt.Sprintf("%s step %d", where, k), lg, rs)
		if k < len(tokens) {
			lg = mustLogits(t, m, mustDecode(t, m, st, []int{tokens[k]}))
		}
	}
}

// finish applies F3's and F4's totals over one model and logs its figures.
func (c *forcedCheck) finish(t *testing.T, model string) {
	t.Helper()
	if c.steps == 0 {
		t.Fatal("no forced steps compared")
	}
	if f := float64(c.top1Agree) / float64(c.steps); f < c.tol.top1 {
		t.Errorf("F3: top-1 agreement %d/%d < %.0f%%", c.top1Agree, c.steps, 100*c.tol.top1)
	}
	if f := float64(c.top5Got) / float64(c.top5All); f < c.tol.top5 {
		t.Errorf("F4: top-5 recovered %d/%d < %.0f%%", c.top5Got, c.top5All, 100*c.tol.top5)
	}
	t.Logf("%s: F1 worst max|Δlogit|/σ %.4f (τ %.2f); F2 worst %.2g σ; F3 top-1 %d/%d; F4 top-5 %d/%d (worst step %d)",
		model, c.worstF1, c.tol.tau, c.worstF2, c.top1Agree, c.steps, c.top5Got, c.top5All, c.worstTop5)
}

func TestConformanceForced(t *testing.T) {
	c := loadConf(t)
	for _, mi := range c.manifest.Models {
		t.Run(strings.TrimSuffix(mi.File, ".bin"), func(t *testing.T) {
			m := c.load(t, mi.File)
			var fc *forcedCheck
			for _, a := range c.manifest.Audio {
				ref := c.clip(t, mi.File, a.File)
				if fc == nil {
					fc = newForcedCheck(tolerancesFor(mi.WeightType), ref.Forced.ProbeIDs)
				}
				pcm := readWAV(t, filepath.Join(c.dir, "audio", a.File))
				mel := m.logMel(pcm)
				input := make([]float32, m.hp.NMels*windowFrames)
				for _, w := range ref.Forced.Windows {
					mel.window(w.Seek, input)
					st := mustWindow(t, m, input, 0)
					fc.window(t, m, st, fmt.Sprintf("%s seek %d", a.File, w.Seek), ref.Forced.Prompt, ref.Forced.Tokens, w.Steps)
				}
			}
			fc.finish(t, mi.File)
		})
	}
}

func TestConformanceGreedy(t *testing.T) {
	c := loadConf(t)
	for _, mi := range c.manifest.Models {
		t.Run(strings.TrimSuffix(mi.File, ".bin"), func(t *testing.T) {
			tol := tolerancesFor(mi.WeightType)
			m := c.load(t, mi.File)
			var worstG5, worstG6 float64
			var identical, windows, tokensEqual int
			var divergences []string
			for _, a := range c.manifest.Audio {
				ref := c.clip(t, mi.File, a.File)
				pcm := readWAV(t, filepath.Join(c.dir, "audio", a.File))
				res, err := m.run(context.Background(), pcm, langID("en"), 32)
				if err != nil {
					t.Fatal(err)
				}
				sigma := map[int]float64{}
				for _, w := range ref.Forced.Windows {
					sigma[w.Seek] = w.Steps[0].Std
				}
				// G1
				if len(res.windows) != len(ref.Greedy.Windows) {
					t.Errorf("G1 %s: %d windows, reference %d", a.File, len(res.windows), len(ref.Greedy.Windows))
					continue
				}
				compare := true
				for wi, rw := range ref.Greedy.Windows {
					w := res.windows[wi]
					where := fmt.Sprintf("%s window %d", a.File, wi)
					windows++
					if w.seek != rw.Seek {
						t.Errorf("G1 %s: seek %d, reference %d", where, w.seek, rw.Seek)
						compare = false
					}
					samePrompt := slices.Equal(w.prompt, rw.Prompt)
					if samePrompt {
						// G6
						d := math.Abs(math.Log(w.noSpeechProb / rw.NoSpeech))
						worstG6 = math.Max(worstG6, d)
						if d > tol.g6 {
							t.Errorf("G6 %s: |ln p/p_ref| = %.3g > %.3g (p %.4g, ref %.4g)", where, d, tol.g6, w.noSpeechProb, rw.NoSpeech)
						}
					}
					if !compare {
						continue
					}
					// G3
					if !samePrompt {
						t.Errorf("G3 %s: prompt %v, reference %v", where, w.prompt, rw.Prompt)
						compare = false
						continue
					}
					// G2
					i := 0
					for i < len(w.tokens) && i < len(rw.Tokens) && w.tokens[i] == rw.Tokens[i] {
						i++
					}
					if i == len(w.tokens) && i == len(rw.Tokens) {
						identical++
						tokensEqual += i
						// G4 and G5
						if got := hex.EncodeToString(w.text); got != rw.TextHex {
							t.Errorf("G4 %s: text %s, reference %s", where, got, rw.TextHex)
						}
						d := math.Abs(w.avgLogprob - rw.AvgLogprob)
						worstG5 = math.Max(worstG5, d)
						if d > tol.g5 {
							t.Errorf("G5 %s: |Δ avg_logprob| = %.4g > %.3g", where, d, tol.g5)
						}
						continue
					}
					tokensEqual += i
					if i >= len(rw.Steps) {
						t.Errorf("G2 %s: reference ended after %d tokens, ours goes on: %v", where, len(rw.Tokens), w.tokens)
						compare = false
						continue
					}
					margin := rw.Steps[i][1] - rw.Steps[i][3]
					sw, ok := sigma[rw.Seek]
					if !ok {
						t.Fatalf("%s: no forced window at seek %d", where, rw.Seek)
					}
					if margin >= tol.m*sw {
						t.Errorf("G2 %s: step %d differs (ours %v, reference %v) at a reference margin of %.4g σ ≥ %.3g σ",
							where, i, w.tokens[min(i, len(w.tokens)-1)], rw.Tokens[i], margin/sw, tol.m)
					} else {
						ours := "-"
						if i < len(w.margins) {
							ours = fmt.Sprintf("%.4fσ", float64(w.margins[i])/sw)
						}
						divergences = append(divergences, fmt.Sprintf("%s step %d at %.4fσ (ours %s)", where, i, margin/sw, ours))
					}
					compare = false
				}
			}
			t.Logf("%s: greedy windows identical %d/%d (%d equal tokens); allowed divergences: %v; G5 worst |Δ avg_logprob| %.4f; G6 worst |ln p/p_ref| %.4f",
				mi.File, identical, windows, tokensEqual, divergences, worstG5, worstG6)
		})
	}
}

func TestConformanceLanguage(t *testing.T) {
	c := loadConf(t)
	n := 0
	for _, mi := range c.manifest.Models {
		if !mi.Multilingual {
			continue
		}
		n++
		t.Run(strings.TrimSuffix(mi.File, ".bin"), func(t *testing.T) {
			tol := tolerancesFor(mi.WeightType)
			m := c.load(t, mi.File)
			if !m.multilingual {
				t.Fatal("the manifest says multilingual, the model does not")
			}
			var worst float64
			var l2, l2n, agree int
			for _, a := range c.manifest.Audio {
				ref := c.clip(t, mi.File, a.File)
				if ref.LanguageDetection == nil || len(ref.LanguageDetection.Probs) != len(langCodes) {
					t.Fatalf("%s: no language detection of 100 ids in the reference", a.File)
				}
				pcm := readWAV(t, filepath.Join(c.dir, "audio", a.File))
				mel := m.logMel(pcm)
				input := make([]float32, m.hp.NMels*windowFrames)
				mel.window(0, input)
				st := mustWindow(t, m, input, 0)
				id, probs, err := m.detectLanguage(st)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range probs {
					worst = math.Max(worst, math.Abs(p-ref.LanguageDetection.Probs[i]))
				}
				if id == ref.LanguageDetection.LangID {
					agree++
				}
				sorted := append([]float64(nil), ref.LanguageDetection.Probs...)
				sort.Float64s(sorted)
				if sorted[len(sorted)-1]-sorted[len(sorted)-2] >= 0.1 {
					l2n++
					if id == ref.LanguageDetection.LangID {
						l2++
					} else {
						t.Errorf("L2 %s: language %d (%s), reference %d", a.File, id, langCodes[id], ref.LanguageDetection.LangID)
					}
				}
			}
			if worst > tol.l1 {
				t.Errorf("L1: max |Δp| = %.4g > %.3g", worst, tol.l1)
			}
			t.Logf("%s: L1 worst |Δp| %.4f; L2 %d of %d decisive clips (same language on %d of %d clips)",
				mi.File, worst, l2, l2n, agree, len(c.manifest.Audio))
		})
	}
	if n == 0 {
		t.Fatal("no multilingual model in the reference data")
	}
}
