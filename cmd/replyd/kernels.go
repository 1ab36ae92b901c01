package main

// Speech on the CPU's best kernels: OpenBLAS picks its kernels by CPU model
// when it is loaded, and an OpenBLAS older than the CPU falls back to old
// ones (Debian 12's 0.3.21 runs a Sapphire Rapids Xeon on its Prescott
// kernels). correctKernels, the first thing main does, re-executes replyd
// with OPENBLAS_CORETYPE set to the best core for the CPU when OpenBLAS
// chose an older one (internal/blascore decides); every subcommand passes
// through main, so serve, transcribe, eval and the benchmarks all get it.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/blascore"
	"github.com/replyd/replyd/internal/cpubudget"
)

// kernelsDecision is what correctKernels decided for this process.
var kernelsDecision blascore.Decision

// kernelsNote says what went wrong with the correction ("" when nothing).
var kernelsNote string

// correctKernels decides about OpenBLAS's kernels and, when they are
// older than the CPU allows, replaces the process by replyd with
// OPENBLAS_CORETYPE set (syscall.Exec of /proc/self/exe, same arguments);
// it returns only when the process goes on as it is.
func correctKernels() {
	best := blascore.Best(blascore.CPU())
	d := blascore.Decide(whisper.OpenBLASCore(), best, os.Getenv(blascore.EnvCoretype), os.Getenv(blascore.EnvMarker))
	if d.Reexec {
		env := append(withoutEnv(os.Environ(), blascore.EnvCoretype, blascore.EnvMarker),
			blascore.EnvCoretype+"="+d.Coretype, blascore.EnvMarker+"="+d.Marker)
		err := syscall.Exec("/proc/self/exe", os.Args, env)
		// Exec returns only when it failed: go on with OpenBLAS's kernels.
		kernelsNote = fmt.Sprintf("could not re-execute with %s=%s: %v", blascore.EnvCoretype, d.Coretype, err)
		d = blascore.Decision{Source: "openblas"}
	}
	kernelsDecision = d
}

// withoutEnv returns env without the variables names.
func withoutEnv(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// platform is the engines' kernels and the CPU budget for the log, the
// Status view and `replyd kernels`; cores is REPLYD_CPU_CORES in effect (0:
// the budget's own figure).
func platform(cores int) api.Platform {
	b := cpubudget.Current()
	cpu := api.CPUView{Cores: b.Cores, Available: b.Cores, Source: b.Source, AffinityCPUs: b.Affinity,
		CgroupQuotaCores: b.Quota, HostCPUs: b.Host}
	if cores > 0 && cores != b.Cores {
		cpu.Cores, cpu.Source = cores, "configured"
	}
	return api.Platform{
		Kernels: api.KernelsView{
			OpenBLASCore:          whisper.OpenBLASCore(),
			OpenBLASSource:        kernelsDecision.Source,
			OpenBLASCorrectedFrom: kernelsDecision.CorrectedFrom,
			OpenBLASBest:          blascore.Best(blascore.CPU()),
			OpenBLASConfig:        strings.TrimSpace(whisper.OpenBLASConfig()),
			GGMLCPU:               llm.CPUFeatures(),
		},
		CPU: cpu,
	}
}

// logArgs renders p for the start-up log.
func (p kernelsLog) args() []any {
	k, c := p.Kernels, p.CPU
	a := []any{"openblas_core", k.OpenBLASCore, "openblas_source", k.OpenBLASSource}
	if k.OpenBLASCorrectedFrom != "" {
		a = append(a, "openblas_corrected_from", k.OpenBLASCorrectedFrom)
	}
	if k.OpenBLASSource == "admin" {
		a = append(a, "note", blascore.EnvCoretype+" set by the admin: kept (this CPU's best: "+k.OpenBLASBest+")")
	}
	if kernelsNote != "" {
		a = append(a, "problem", kernelsNote)
	}
	return append(a, "ggml_cpu", k.GGMLCPU, "cpu_cores", c.Cores, "cpu_source", c.Source)
}

// kernelsLog is a Platform with its log rendering.
type kernelsLog api.Platform

// cmdKernels prints the kernels and the CPU budget as JSON (`replyd
// kernels`): what /v1/admin/status shows, without a running server.
func cmdKernels(stdout io.Writer) error {
	p := platform(0)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Kernels api.KernelsView `json:"kernels"`
		CPU     api.CPUView     `json:"cpu"`
		Problem string          `json:"problem,omitempty"`
	}{p.Kernels, p.CPU, kernelsNote})
}

// platformRef is platform for api.Options.
func platformRef(cores int) *api.Platform {
	p := platform(cores)
	return &p
}
