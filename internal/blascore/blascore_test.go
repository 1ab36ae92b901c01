package blascore

import "testing"

func TestBest(t *testing.T) {
	avx512 := Features{X86: true, SSE3: true, SSSE3: true, SSE41: true, SSE42: true, AVX: true, AVX2: true, FMA: true,
		AVX512F: true, AVX512BW: true, AVX512DQ: true, AVX512VL: true, AVX512CD: true}
	avx2 := avx512
	avx2.AVX512F, avx2.AVX512BW, avx2.AVX512DQ, avx2.AVX512VL, avx2.AVX512CD = false, false, false, false, false
	noBW := avx512
	noBW.AVX512BW = false // Xeon Phi (AVX512F without BW): not SkylakeX
	avx := avx2
	avx.AVX2, avx.FMA = false, false
	sse42 := avx
	sse42.AVX = false
	ssse3 := sse42
	ssse3.SSE41, ssse3.SSE42 = false, false
	sse3 := ssse3
	sse3.SSSE3 = false
	for _, c := range []struct {
		name string
		f    Features
		want string
	}{
		{"AVX-512 (Skylake-SP to Sapphire Rapids, Zen 4)", avx512, "SkylakeX"},
		{"AVX2+FMA (Haswell, Zen 1-3, Alder Lake-N)", avx2, "Haswell"},
		{"AVX-512F without BW", noBW, "Haswell"},
		{"AVX", avx, "Sandybridge"},
		{"SSE4.2", sse42, "Nehalem"},
		{"SSSE3", ssse3, "Core2"},
		{"SSE3", sse3, "Prescott"},
		{"not x86", Features{}, ""},
		{"x86 without SSE3", Features{X86: true}, ""},
	} {
		if got := Best(c.f); got != c.want {
			t.Errorf("%s: Best = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRank(t *testing.T) {
	order := []string{"Prescott", "Core2", "Penryn", "Nehalem", "Sandybridge", "Haswell", "Cooperlake", "SkylakeX", "SapphireRapids"}
	for i := 1; i < len(order); i++ {
		if Rank(order[i-1]) >= Rank(order[i]) {
			t.Errorf("Rank(%s) = %d is not below Rank(%s) = %d", order[i-1], Rank(order[i-1]), order[i], Rank(order[i]))
		}
	}
	if Rank("Zen") != Rank("Haswell") || Rank("HASWELL") != Rank("haswell") || Rank("armv8") != 0 {
		t.Error("Zen ranks as Haswell, case does not matter, other names rank 0")
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name                            string
		current, best, coretype, marker string
		want                            Decision
	}{
		{"fallback corrected", "Prescott", "SkylakeX", "", "",
			Decision{Reexec: true, Coretype: "SkylakeX", Marker: "SkylakeX:Prescott", Source: "replyd", CorrectedFrom: "Prescott"}},
		{"older AVX2 core corrected", "Haswell", "SkylakeX", "", "",
			Decision{Reexec: true, Coretype: "SkylakeX", Marker: "SkylakeX:Haswell", Source: "replyd", CorrectedFrom: "Haswell"}},
		{"already best", "SkylakeX", "SkylakeX", "", "", Decision{Source: "openblas"}},
		{"newer than best kept", "SapphireRapids", "SkylakeX", "", "", Decision{Source: "openblas"}},
		{"Cooperlake replaced (slower for speech)", "Cooperlake", "SkylakeX", "", "",
			Decision{Reexec: true, Coretype: "SkylakeX", Marker: "SkylakeX:Cooperlake", Source: "replyd", CorrectedFrom: "Cooperlake"}},
		{"Zen is as good as Haswell", "Zen", "Haswell", "", "", Decision{Source: "openblas"}},
		{"unknown CPU", "armv8", "", "", "", Decision{Source: "unknown"}},
		{"admin's value kept", "Prescott", "SkylakeX", "Prescott", "", Decision{Source: "admin"}},
		{"admin's value kept over another marker", "Haswell", "SkylakeX", "Haswell", "SkylakeX:Prescott", Decision{Source: "admin"}},
		{"after the re-execution: done", "SkylakeX", "SkylakeX", "SkylakeX", "SkylakeX:Prescott",
			Decision{Source: "replyd", CorrectedFrom: "Prescott"}},
		{"after the re-execution, name not taken: no loop", "Haswell", "SkylakeX", "skylakex", "SkylakeX:Haswell",
			Decision{Source: "replyd", CorrectedFrom: "Haswell"}},
		{"set by replyd to something else: decided again", "Prescott", "SkylakeX", "Prescott", "Prescott:Haswell",
			Decision{Reexec: true, Coretype: "SkylakeX", Marker: "SkylakeX:Haswell", Source: "replyd", CorrectedFrom: "Haswell"}},
	} {
		if got := Decide(c.current, c.best, c.coretype, c.marker); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
		// Whatever it decides, the re-executed process decides no further
		// re-execution.
		if d := Decide(c.current, c.best, c.coretype, c.marker); d.Reexec {
			if d2 := Decide(d.Coretype, c.best, d.Coretype, d.Marker); d2.Reexec {
				t.Errorf("%s: a second re-execution: %+v", c.name, d2)
			}
		}
	}
}
