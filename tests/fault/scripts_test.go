package fault

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
		"Type":                  "simple",
		"User":                  "replyd",
		"Restart":               "on-failure",
		"EnvironmentFile":       "/etc/replyd/replyd.env",
		"ExecStart":             "/usr/local/bin/replyd serve",
		"NoNewPrivileges":       "yes",
		"ProtectSystem":         "strict",
		"ProtectHome":           "yes",
		"PrivateTmp":            "yes",
		"ReadWritePaths":        "/var/lib/replyd",
		"CapabilityBoundingSet": "",
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

// TestShellcheck runs shellcheck on the scripts when it is installed.
func TestShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("SKIP: shellcheck is not installed (apt-get install shellcheck)")
	}
	var scripts []string
	for _, s := range []string{"install.sh", "fetch-models.sh", "deps.sh"} {
		scripts = append(scripts, filepath.Join(repoRoot, "scripts", s))
	}
	if out, err := exec.Command(sc, scripts...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}
