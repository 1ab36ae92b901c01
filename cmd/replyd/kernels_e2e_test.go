package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/internal/blascore"
)

// kernelsOut is `replyd kernels`'s output.
type kernelsOut struct {
	Kernels api.KernelsView `json:"kernels"`
	CPU     api.CPUView     `json:"cpu"`
	Problem string          `json:"problem"`
}

// runKernels runs the test binary as `replyd kernels` (through main, as
// the real program) with this process's environment less OPENBLAS_CORETYPE
// and the marker, plus env; wrap, when not nil, is a command line to run it
// under (taskset, a shell).
func runKernels(t *testing.T, env map[string]string, wrap ...string) kernelsOut {
	t.Helper()
	args := append(wrap, os.Args[0], "kernels")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(withoutEnv(os.Environ(), blascore.EnvCoretype, blascore.EnvMarker), "REPLYD_E2E_EXEC=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var k kernelsOut
	if err := json.Unmarshal(out, &k); err != nil {
		t.Fatalf("replyd kernels printed %q: %v", out, err)
	}
	return k
}

// bestOrSkip is the best OpenBLAS core of this CPU, or skips the test
// where there is none to correct to (not x86).
func bestOrSkip(t *testing.T) string {
	best := blascore.Best(blascore.CPU())
	if best == "" || blascore.Rank(best) <= blascore.Rank("Prescott") {
		t.Skip("no OpenBLAS core better than Prescott known for this CPU")
	}
	return best
}

// TestKernelsFallbackCorrected forces OpenBLAS's Prescott fallback as if
// replyd itself had set it (the marker), so that replyd decides again: the
// real program re-executes itself and ends on this CPU's best kernels.
// Without the re-execution in main it stays on Prescott.
func TestKernelsFallbackCorrected(t *testing.T) {
	best := bestOrSkip(t)
	k := runKernels(t, map[string]string{blascore.EnvCoretype: "Prescott", blascore.EnvMarker: "Prescott:Prescott"})
	if !strings.EqualFold(k.Kernels.OpenBLASCore, best) || k.Kernels.OpenBLASSource != "replyd" || k.Kernels.OpenBLASCorrectedFrom != "Prescott" {
		t.Errorf("kernels after a forced Prescott fallback = %+v (%s), want core %s set by replyd, corrected from Prescott", k.Kernels, k.Problem, best)
	}
}

// TestKernelsAdminKept: an OPENBLAS_CORETYPE replyd did not set is the
// admin's and is kept, even when it is worse.
func TestKernelsAdminKept(t *testing.T) {
	bestOrSkip(t)
	k := runKernels(t, map[string]string{blascore.EnvCoretype: "Prescott"})
	if k.Kernels.OpenBLASCore != "Prescott" || k.Kernels.OpenBLASSource != "admin" || k.Kernels.OpenBLASCorrectedFrom != "" {
		t.Errorf("kernels with the admin's OPENBLAS_CORETYPE=Prescott = %+v, want Prescott kept, source admin", k.Kernels)
	}
}

// TestKernelsUnset: with nothing set, speech runs on the best kernels or
// newer ones, and ggml names its features.
func TestKernelsUnset(t *testing.T) {
	best := bestOrSkip(t)
	k := runKernels(t, nil)
	if blascore.Rank(k.Kernels.OpenBLASCore) < blascore.Rank(best) || k.Kernels.OpenBLASBest != best {
		t.Errorf("kernels with nothing set = %+v, want %s or newer", k.Kernels, best)
	}
	if k.Kernels.GGMLCPU == "" || !strings.Contains(k.Kernels.OpenBLASConfig, "OpenBLAS") {
		t.Errorf("kernels = %+v: ggml's features or OpenBLAS's config missing", k.Kernels)
	}
	t.Logf("%+v", k.Kernels)
}

// TestCPUBudgetTaskset: the cores replyd plans with follow the affinity
// mask of `taskset -c 0`.
func TestCPUBudgetTaskset(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	k := runKernels(t, nil, "taskset", "-c", "0")
	if k.CPU.Cores != 1 || k.CPU.Source != "affinity" || k.CPU.AffinityCPUs != 1 {
		t.Errorf("cpu under taskset -c 0 = %+v, want 1 core from the affinity mask", k.CPU)
	}
}

// TestCPUBudgetCgroup runs the binary in a real cgroup with a quota of
// half a core (cgroup v2's cpu.max, or v1's cpu.cfs_quota_us where the cpu
// controller is on v1): it plans with 1 core, named by the cgroup. Skipped
// where the test may not make a cgroup (not root, a read-only
// /sys/fs/cgroup in a container).
func TestCPUBudgetCgroup(t *testing.T) {
	dir, quotaFile, quota := makeCgroup(t)
	defer os.Remove(dir)
	if err := os.WriteFile(filepath.Join(dir, quotaFile), []byte(quota), 0o644); err != nil {
		t.Skipf("cannot set the cgroup's quota: %v", err)
	}
	// The shell moves itself into the cgroup, then becomes replyd.
	k := runKernels(t, nil, "sh", "-c", fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, dir), "sh")
	if k.CPU.Cores != 1 || !strings.Contains(k.CPU.Source, "cgroup") || k.CPU.CgroupQuotaCores != 0.5 {
		t.Errorf("cpu in a cgroup of half a core = %+v, want 1 core from the cgroup", k.CPU)
	}
	t.Logf("%+v", k.CPU)
}

// makeCgroup makes a test cgroup with the cpu controller and returns its
// directory, its quota file and the quota of half a core in that file's
// format; it skips the test where that is not allowed.
func makeCgroup(t *testing.T) (string, string, string) {
	name := "replyd-test-" + strconv.Itoa(os.Getpid())
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "cpu") {
		dir := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			return dir, "cpu.max", "50000 100000"
		} else {
			t.Skipf("cgroup v2: cannot make a cgroup: %v", err)
		}
	}
	for _, m := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		if _, err := os.Stat(filepath.Join(m, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Skipf("cgroup v1: cannot make a cgroup: %v", err)
		}
		return dir, "cpu.cfs_quota_us", "50000"
	}
	t.Skip("no cgroup with the cpu controller found")
	return "", "", ""
}

// TestStatusNamesKernels: /v1/admin/status of the real server names the
// kernels and the CPU budget, here after a forced fallback was corrected.
func TestStatusNamesKernels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real binary")
	}
	const adminKey = "kernels-admin-key-0123456789abcdef"
	_, env := demoEnv(t, adminKey)
	env[blascore.EnvCoretype] = "Prescott"
	env[blascore.EnvMarker] = "Prescott:Prescott"
	p := startReplyd(t, env)
	st := p.JSON("GET", "/v1/admin/status", map[string]string{"X-ADMIN-KEY": adminKey}, nil, 200)
	k, _ := st["kernels"].(map[string]any)
	c, _ := st["cpu"].(map[string]any)
	if k == nil || c == nil {
		t.Fatalf("status has no kernels or cpu: %v", st)
	}
	best := blascore.Best(blascore.CPU())
	if best != "" && (!strings.EqualFold(fmt.Sprint(k["openblas_core"]), best) || k["openblas_corrected_from"] != "Prescott") {
		t.Errorf("status kernels = %v, want %s corrected from Prescott", k, best)
	}
	if k["ggml_cpu"] == "" || c["cores"] == nil || c["source"] == "" {
		t.Errorf("status kernels %v, cpu %v: fields missing", k, c)
	}
}
