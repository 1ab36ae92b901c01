// Package blascore decides which OpenBLAS kernels (its "core") speech runs
// on. A dynamic OpenBLAS picks its kernels by CPU model when it is loaded;
// a build older than the CPU (Debian 12 ships 0.3.21) does not know the
// model and falls back, on a Sapphire Rapids Xeon or an Alder Lake-N mini
// PC, to its Prescott (SSE3) kernels, several times slower. OpenBLAS reads
// OPENBLAS_CORETYPE only when it is loaded, so cmd/replyd re-executes
// itself with it set (Decide says when and to what) before anything else
// starts. The cgo side (openblas_get_corename) is engine/whisper's.
package blascore

import "strings"

// Features are the CPU features that decide the kernels.
type Features struct {
	X86                         bool // amd64: only x86 cores are ranked
	SSE3, SSSE3, SSE41, SSE42   bool
	AVX, AVX2, FMA              bool
	AVX512F, AVX512BW, AVX512DQ bool
	AVX512VL, AVX512CD          bool
	AVX512BF16                  bool
}

// rank orders the x86 core names of OpenBLAS (driver/others/dynamic.c) by
// the instruction sets their kernels use; a higher rank needs more. Names
// of equal rank are alternatives (Haswell and Zen both use AVX2 and FMA).
// Names not listed (other architectures, "Unknown") rank 0. Cooperlake
// ranks below SkylakeX although it adds BF16: speech uses single-precision
// GEMM only, and on the dev VM (AMD EPYC with AVX-512 BF16, OpenBLAS 0.3.21,
// which picks Cooperlake there) SkylakeX's kernels transcribed faster
// (docs/performance.md, "OpenBLAS kernels"), so replyd replaces Cooperlake.
var rank = map[string]int{
	"prescott": 1, "katmai": 1, "coppermine": 1, "northwood": 1, "banias": 1, "athlon": 1, "opteron": 1, "opteron_sse3": 1, "barcelona": 1, "bobcat": 1,
	"core2": 2, "atom": 2,
	"penryn": 3, "dunnington": 3,
	"nehalem":     4,
	"sandybridge": 5, "bulldozer": 5, "piledriver": 5, "steamroller": 5, "excavator": 5,
	"haswell": 6, "zen": 6,
	"skylakex":       8,
	"cooperlake":     7,
	"sapphirerapids": 9,
}

// Rank is the rank of an OpenBLAS core name (case does not matter), 0 when
// unknown.
func Rank(core string) int { return rank[strings.ToLower(core)] }

// Best returns the core whose kernels this CPU should use, among those
// Debian 12's OpenBLAS 0.3.21 accepts in OPENBLAS_CORETYPE (its
// force_coretype list; Cooperlake and SapphireRapids are not in it, and
// their kernels are SkylakeX's with BF16 extras speech does not use), ""
// where nothing is to be chosen (not x86, or not even SSE3).
//
// The rule: the newest kernels whose instructions the CPU has. On AVX-512
// (F, BW, DQ, VL and CD, as OpenBLAS itself checks) that is SkylakeX, on
// AVX2 with FMA Haswell, on AVX Sandybridge, on SSE4.2 Nehalem, on SSSE3
// Core2, on SSE3 Prescott. Measured on an AMD EPYC with AVX-512, 2 threads,
// replyd transcribe of jfk.wav on the base.en q8_0 shape: see
// docs/performance.md ("OpenBLAS kernels").
func Best(f Features) string {
	switch {
	case !f.X86:
		return ""
	case f.AVX512F && f.AVX512BW && f.AVX512DQ && f.AVX512VL && f.AVX512CD && f.AVX2 && f.FMA:
		return "SkylakeX"
	case f.AVX2 && f.FMA:
		return "Haswell"
	case f.AVX:
		return "Sandybridge"
	case f.SSE42:
		return "Nehalem"
	case f.SSSE3:
		return "Core2"
	case f.SSE3:
		return "Prescott"
	}
	return ""
}

// Env names.
const (
	// EnvCoretype is OpenBLAS's own variable.
	EnvCoretype = "OPENBLAS_CORETYPE"
	// EnvMarker says that replyd itself set OPENBLAS_CORETYPE: its value
	// is "SET:FROM", the core replyd set and the one OpenBLAS had chosen
	// by itself. An OPENBLAS_CORETYPE without a matching marker is the
	// admin's and is kept.
	EnvMarker = "REPLYD_OPENBLAS_CORRECTED"
)

// Decision is what replyd does about OpenBLAS's kernels at start-up.
type Decision struct {
	// Reexec is true when the process must execute itself again with
	// OPENBLAS_CORETYPE=Coretype and EnvMarker=Marker added.
	Reexec   bool
	Coretype string
	Marker   string
	// Source says who chose the kernels: "openblas" (its own choice is
	// already the best), "replyd" (replyd set OPENBLAS_CORETYPE),
	// "admin" (OPENBLAS_CORETYPE set outside replyd, kept), "unknown"
	// (no best core known for this CPU).
	Source string
	// CorrectedFrom is the core OpenBLAS had chosen by itself, when
	// replyd replaced it.
	CorrectedFrom string
}

// Decide returns the decision for the current process: current is
// openblas_get_corename(), best is Best of this CPU, coretype and marker
// the values of OPENBLAS_CORETYPE and EnvMarker ("" when unset). It never
// asks for a second re-execution: after one, coretype and marker agree on
// best.
func Decide(current, best, coretype, marker string) Decision {
	set, from, marked := strings.Cut(marker, ":")
	switch {
	case coretype != "" && marked && strings.EqualFold(set, coretype):
		// replyd set it, in this process's parent.
		if best == "" || strings.EqualFold(coretype, best) {
			return Decision{Source: "replyd", CorrectedFrom: from}
		}
		// Set by another replyd (another rule or binary): decide again,
		// keeping what OpenBLAS had chosen by itself.
		return Decision{Reexec: true, Coretype: best, Marker: best + ":" + from, Source: "replyd", CorrectedFrom: from}
	case coretype != "":
		return Decision{Source: "admin"}
	case best == "":
		return Decision{Source: "unknown"}
	case Rank(current) < Rank(best):
		return Decision{Reexec: true, Coretype: best, Marker: best + ":" + current, Source: "replyd", CorrectedFrom: current}
	}
	return Decision{Source: "openblas"}
}
