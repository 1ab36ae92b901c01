package fault

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/testutil"
)

// TestInstallDryRun runs scripts/install.sh --dry-run (no root, no systemd
// needed) and checks the plan it prints: user, binary, data and config
// modes, the unit, enable --now, and the low-port drop-in only when needed.
func TestInstallDryRun(t *testing.T) {
	script := filepath.Join(repoRoot, "scripts", "install.sh")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("bash", append([]string{script, "--dry-run", "--bin", replydBin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh --dry-run %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run()
	for _, want := range []string{
		"+ install -D -m 0755 -o root -g root " + replydBin + " /usr/local/bin/replyd",
		"+ install -d -m 0750 -o replyd -g replyd /var/lib/replyd",
		"+ write /etc/replyd/replyd.env (mode 0640, owner root:replyd):",
		"REPLYD_DATA_DIR=/var/lib/replyd",
		"REPLYD_ADDR=:8080",
		"REPLYD_TLS=auto",
		"#REPLYD_OTP_CHANNEL=console",
		"+ install -m 0644 -o root -g root " + filepath.Join(repoRoot, "scripts", "replyd.service") + " /etc/systemd/system/replyd.service",
		"+ systemctl daemon-reload",
		"+ systemctl enable --now replyd",
		"REPLYD ADMIN KEY:",
		"/admin/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if _, err := exec.Command("getent", "passwd", "replyd").Output(); err != nil &&
		!strings.Contains(out, "useradd --system --user-group") {
		t.Errorf("no replyd user here, and the plan does not create one:\n%s", out)
	}
	if strings.Contains(out, "AmbientCapabilities=CAP_NET_BIND_SERVICE") {
		t.Errorf("port 8080 got the low-port capability drop-in:\n%s", out)
	}
	low := run("--addr", ":443")
	if !strings.Contains(low, "AmbientCapabilities=CAP_NET_BIND_SERVICE") || !strings.Contains(low, "REPLYD_ADDR=:443") {
		t.Errorf("port 443: no CAP_NET_BIND_SERVICE drop-in:\n%s", low)
	}

	// A models folder: verified, copied, and configured.
	models := t.TempDir()
	for _, f := range []string{"qwen2.5-1.5b-instruct-q4_k_m.gguf", "ggml-base.en.bin"} {
		if err := os.WriteFile(filepath.Join(models, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := run("--models", models)
	for _, want := range []string{
		"+ /usr/local/bin/replyd models verify --dir " + models,
		"REPLYD_LLM_MODEL=/var/lib/replyd/models/qwen2.5-1.5b-instruct-q4_k_m.gguf",
		"REPLYD_WHISPER_MODEL=/var/lib/replyd/models/ggml-base.en.bin",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("--models plan lacks %q:\n%s", want, m)
		}
	}

	if out, err := exec.Command("bash", script, "--bogus").CombinedOutput(); err == nil {
		t.Errorf("install.sh accepted an unknown option:\n%s", out)
	}
}

// TestUnitHardening holds scripts/replyd.service to the hardening the
// appliance promises, and keeps out the settings that would break inference.
func TestUnitHardening(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "replyd.service"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		set[k] = v
	}
	for k, v := range map[string]string{
		"Type":                    "notify",
		"NotifyAccess":            "main",
		"TimeoutStartSec":         "10min",
		"SystemCallArchitectures": "native",
		"RemoveIPC":               "yes",
		"PrivateMounts":           "yes",
		"ProtectProc":             "invisible",
		"User":                    "replyd",
		"Restart":                 "on-failure",
		"EnvironmentFile":         "/etc/replyd/replyd.env",
		"ExecStart":               "/usr/local/bin/replyd serve",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"ReadWritePaths":          "/var/lib/replyd",
		"CapabilityBoundingSet":   "",
	} {
		if got, ok := set[k]; !ok || got != v {
			t.Errorf("%s=%q, want %q", k, got, v)
		}
	}
	if _, ok := set["LimitNOFILE"]; !ok {
		t.Error("LimitNOFILE is not set")
	}
	// Each of these can break llama.cpp or lock the GPU out: W+X memory for
	// JIT code, a device allow-list (ProtectClock implies one) that denies
	// /dev/nvidia*, a syscall filter the CUDA driver trips.
	for _, k := range []string{"MemoryDenyWriteExecute", "PrivateDevices", "SystemCallFilter", "ProtectClock", "DeviceAllow", "DevicePolicy"} {
		if _, ok := set[k]; ok {
			t.Errorf("%s is set: it can break llama.cpp or the GPU", k)
		}
	}
}

// TestShellcheck runs shellcheck on the scripts.
func TestShellcheck(t *testing.T) {
	sc := testutil.Tool(t, "shellcheck", "the shell scripts")
	var scripts []string
	for _, s := range []string{"install.sh", "fetch-models.sh", "deps.sh", "skip-summary.sh", "gpu-check.sh", "gpu-stage.sh",
		"arch-flags.sh", "check-arch.sh", "test-arm64.sh", "arm64-serve-check.sh", "arm64-vm.sh", "arm64-guest-tests.sh",
		"arm64-hosttool.sh", "bench-compare.sh"} {
		scripts = append(scripts, filepath.Join(repoRoot, "scripts", s))
	}
	if out, err := exec.Command(sc, scripts...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// pathWithout returns a PATH of one directory holding links to every
// program of the current PATH except the named ones.
func pathWithout(t *testing.T, hide ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if slices.Contains(hide, name) {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				continue // an earlier PATH entry wins
			}
			_ = os.Symlink(filepath.Join(d, name), filepath.Join(dir, name))
		}
	}
	return dir
}

// TestInstallFFmpeg: install.sh installs ffmpeg (M4A/AAC from iPads) when
// it is missing, and says at the end that M4A uploads are unavailable when
// it cannot.
func TestInstallFFmpeg(t *testing.T) {
	script := filepath.Join(repoRoot, "scripts", "install.sh")
	run := func(path string) string {
		t.Helper()
		cmd := exec.Command("bash", script, "--dry-run", "--bin", replydBin)
		cmd.Env = append(os.Environ(), "PATH="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh --dry-run: %v\n%s", err, out)
		}
		return string(out)
	}
	const apt = "+ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg"
	const unavailable = "M4A/AAC uploads (iPads) are UNAVAILABLE: ffmpeg is not installed and this system has no apt-get"
	if _, err := exec.LookPath("ffmpeg"); err == nil {
		if out := run(os.Getenv("PATH")); strings.Contains(out, apt) || strings.Contains(out, "UNAVAILABLE") {
			t.Errorf("ffmpeg is installed, yet the plan installs it or warns:\n%s", out)
		}
	}
	if out := run(pathWithout(t, "ffmpeg")); !strings.Contains(out, apt) {
		t.Errorf("without ffmpeg the plan does not install it:\n%s", out)
	}
	out := strings.TrimSpace(run(pathWithout(t, "ffmpeg", "apt-get")))
	lines := strings.Split(out, "\n")
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-2], unavailable) {
		t.Errorf("without ffmpeg and apt-get the plan does not end by saying M4A is unavailable:\n%s", out)
	}
}

// TestUnitSecurityExposure rates scripts/replyd.service with systemd's own
// analyzer (offline: no running systemd needed) and holds it to an overall
// exposure of 3.5 or less.
func TestUnitSecurityExposure(t *testing.T) {
	sa := testutil.Tool(t, "systemd-analyze", "the unit's exposure")
	unit := filepath.Join(repoRoot, "scripts", "replyd.service")
	out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	// systemd-analyze exits non-zero when the exposure is above its own
	// --threshold (100 by default): the number below is what counts.
	m := regexp.MustCompile(`Overall exposure level for replyd\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("overall exposure %.1f", exposure)
	if exposure > 3.5 {
		t.Errorf("overall exposure %.1f, want at most 3.5:\n%s", exposure, out)
	}
}

// TestDepsSplit: `make run` installs only what building and running need;
// Chromium, shellcheck, Node.js and the test speech tools come with
// `make test`, which gets both sets.
func TestDepsSplit(t *testing.T) {
	deps := filepath.Join(repoRoot, "scripts", "deps.sh")
	list := func(mode string) []string {
		t.Helper()
		out, err := exec.Command("bash", deps, mode, "--list").Output()
		if err != nil {
			t.Fatalf("deps.sh %s --list: %v", mode, err)
		}
		return strings.Fields(string(out))
	}
	run, test := list("run"), list("test")
	for _, p := range []string{"build-essential", "libopenblas-dev", "ffmpeg"} {
		if !slices.Contains(run, p) {
			t.Errorf("deps.sh run lacks %s", p)
		}
	}
	for _, p := range []string{"chromium", "shellcheck", "nodejs", "npm", "espeak-ng", "sox", "postgresql", "haproxy"} {
		if slices.Contains(run, p) {
			t.Errorf("deps.sh run installs %s, which only the tests need", p)
		}
		if !slices.Contains(test, p) {
			t.Errorf("deps.sh test lacks %s", p)
		}
	}
	for _, p := range run {
		if !slices.Contains(test, p) {
			t.Errorf("deps.sh test lacks the run package %s", p)
		}
	}
	makeN := func(target string) string {
		t.Helper()
		out, err := exec.Command("make", "-n", "-C", repoRoot, target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	if out := makeN("run"); !strings.Contains(out, "scripts/deps.sh run") || strings.Contains(out, "deps.sh test") {
		t.Errorf("make run does not install the run dependencies only:\n%s", out)
	}
	if out := makeN("test"); !strings.Contains(out, "scripts/deps.sh test") {
		t.Errorf("make test does not install the test dependencies:\n%s", out)
	}
}

// TestSkipSummary: make test's last line counts the tests that skipped for
// want of the shared data.
func TestSkipSummary(t *testing.T) {
	script := filepath.Join(repoRoot, "scripts", "skip-summary.sh")
	log := filepath.Join(t.TempDir(), "skipped")
	last := func() string {
		t.Helper()
		out, err := exec.Command("bash", script, log).Output()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	if got := last(); !strings.Contains(got, "0 tests skipped") {
		t.Errorf("no skips: %q", got)
	}
	if err := os.WriteFile(log, []byte("TestConformance/a\nTestConformance/b\nTestDecodeOpus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := last(); !strings.Contains(got, "3 tests SKIPPED") {
		t.Errorf("three skips: %q", got)
	}
}
