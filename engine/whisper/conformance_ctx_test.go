//go:build !race

package whisper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The shortened encoder window (audio_ctx) against whisper.cpp's numbers in
// reference-audio-ctx/ (its README): F1–F4 on the forced steps and G2 on
// the greedy tokens, for every file of the folder, on both compute paths
// (TestConformanceGGML runs this again on the ggml graphs).

type refCtx struct {
	AudioCtx int `json:"audio_ctx"`
	NSamples int `json:"n_samples"`
	Greedy   struct {
		Steps  [][4]float64 `json:"steps"`
		Tokens []int        `json:"tokens"`
	} `json:"greedy"`
	Forced struct {
		Prompt []int     `json:"prompt"`
		Steps  []refStep `json:"steps"`
	} `json:"forced"`
}

var ctxFileName = regexp.MustCompile(`^(.+)\.ac(\d+)\.json$`)

func TestConformanceAudioCtx(t *testing.T) {
	c := loadConf(t)
	root := filepath.Join(c.dir, "reference-audio-ctx")
	if _, err := os.Stat(root); err != nil {
		msg := fmt.Sprintf("THE AUDIO_CTX REFERENCE DATA IS MISSING (%v): the audio_ctx conformance tests are NOT running", err)
		if os.Getenv("REPLYD_REQUIRE_TESTDATA") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, mi := range c.manifest.Models {
		t.Run(strings.TrimSuffix(mi.File, ".bin"), func(t *testing.T) {
			stem := strings.TrimSuffix(mi.File, ".bin")
			files, err := filepath.Glob(filepath.Join(root, stem, "*.json"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no audio_ctx reference files for %s (%v)", stem, err)
			}
			tol := tolerancesFor(mi.WeightType)
			m := c.load(t, mi.File)
			var fc *forcedCheck
			var identical, allowed int
			var divergences []string
			for _, f := range files {
				name := filepath.Base(f)
				sm := ctxFileName.FindStringSubmatch(name)
				if sm == nil {
					t.Fatalf("%s: not <clip>.ac<N>.json", name)
				}
				n, _ := strconv.Atoi(sm[2])
				var ref refCtx
				readJSON(t, f, &ref)
				if ref.AudioCtx != n {
					t.Fatalf("%s: audio_ctx %d", name, ref.AudioCtx)
				}
				// The forced tokens and probe ids are those of ../reference.
				full := c.clip(t, mi.File, sm[1]+".wav")
				if fc == nil {
					fc = newForcedCheck(tol, full.Forced.ProbeIDs)
				}
				pcm := readWAV(t, filepath.Join(c.dir, "audio", sm[1]+".wav"))
				if len(pcm) != ref.NSamples {
					t.Fatalf("%s: %d samples, reference %d", name, len(pcm), ref.NSamples)
				}
				input := make([]float32, m.hp.NMels*windowFrames)
				m.logMel(pcm).window(0, input)
				st := mustWindow(t, m, input, n)
				want := n
				if n == 0 {
					want = m.hp.NAudioCtx
				}
				if st.ctx != want {
					t.Fatalf("%s: the decoder attends over %d positions", name, st.ctx)
				}
				fc.window(t, m, st, name, ref.Forced.Prompt, full.Forced.Tokens, ref.Forced.Steps)

				// G2 on one window at seek 0, greedy as ../reference.
				res, err := m.runWindow(context.Background(), pcm, langID("en"), 32, false, n)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.windows) != 1 {
					t.Fatalf("%s: %d windows", name, len(res.windows))
				}
				ours := res.windows[0].tokens
				steps := ref.Greedy.Steps
				sigma := ref.Forced.Steps[0].Std
				i := 0
				for i < len(ours) && i < len(steps) && ours[i] == int(steps[i][0]) {
					i++
				}
				if i == len(ours) && i == len(steps) {
					identical++
					continue
				}
				if i >= len(steps) {
					t.Errorf("G2 %s: the reference ended after %d tokens, ours goes on: %v", name, len(steps), ours)
					continue
				}
				margin := steps[i][1] - steps[i][3]
				if margin >= tol.m*sigma {
					t.Errorf("G2 %s: step %d differs (ours %v, reference %v) at a reference margin of %.4g σ ≥ %.3g σ",
						name, i, ours[min(i, len(ours)-1)], int(steps[i][0]), margin/sigma, tol.m)
					continue
				}
				allowed++
				divergences = append(divergences, fmt.Sprintf("%s step %d at %.4fσ", name, i, margin/sigma))
			}
			fc.finish(t, mi.File+" audio_ctx")
			t.Logf("%s audio_ctx: greedy identical %d/%d; allowed divergences: %v", mi.File, identical, len(files), divergences)
		})
	}
}
