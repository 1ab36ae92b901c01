package house

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/replyd/replyd/internal/testutil"
)

// archFlags runs scripts/arch-flags.sh for target, reading the compiler's
// `-Q --help=target` listing from helpFile when it is not empty.
func archFlags(t *testing.T, target, helpFile string) []string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "arch-flags.sh"), target)
	cmd.Env = os.Environ()
	if helpFile != "" {
		cmd.Env = append(cmd.Env, "ARCH_FLAGS_HELP="+helpFile)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("arch-flags.sh %s: %v", target, err)
	}
	return strings.Fields(string(out))
}

// TestArchFlagsDropAMX: the native build's flags switch off every AMX
// extension the compiler would enable. GCC 12's listing for a Sapphire
// Rapids CPU (what -march=native reports there) enables amx-tile, amx-int8
// and amx-bf16; a newer compiler's amx-fp16 and amx-complex go the same
// way, and a CPU without AMX gets nothing switched off. Without the
// switch-off, ggml-cpu.cpp references the AMX buffer type the module never
// compiles and `make run` fails to link (issue 33).
func TestArchFlagsDropAMX(t *testing.T) {
	spr, err := filepath.Abs(filepath.Join("testdata", "gcc12-sapphirerapids-help-target.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := archFlags(t, "native", spr)
	want := []string{"-march=native", "-mtune=native", "-mno-amx-bf16", "-mno-amx-int8", "-mno-amx-tile"}
	if !slices.Equal(got, want) {
		t.Errorf("native flags on a Sapphire Rapids listing: %q, want %q", got, want)
	}

	dir := t.TempDir()
	newer := filepath.Join(dir, "newer.txt")
	listing := "  -mamx-complex \t\t[enabled]\n  -mamx-fp16 \t\t[enabled]\n  -mamx-tile \t\t[disabled]\n" +
		"  -mavx512f \t\t[enabled]\n"
	if err := os.WriteFile(newer, []byte(listing), 0o644); err != nil {
		t.Fatal(err)
	}
	got = archFlags(t, "graniterapids", newer)
	want = []string{"-march=graniterapids", "-mtune=generic", "-mno-amx-complex", "-mno-amx-fp16"}
	if !slices.Equal(got, want) {
		t.Errorf("flags on a listing with newer AMX extensions: %q, want %q", got, want)
	}

	none := filepath.Join(dir, "none.txt")
	if err := os.WriteFile(none, []byte("  -mamx-int8 \t\t[disabled]\n  -mavx2 \t\t[enabled]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = archFlags(t, "native", none)
	want = []string{"-march=native", "-mtune=native"}
	if !slices.Equal(got, want) {
		t.Errorf("flags on a listing without AMX: %q, want %q", got, want)
	}
}

// TestArchFlagsDefineNoAMX asks the real compiler: for this machine and for
// every target of `make check-arch`, the flags define no __AMX_*__ macro
// (what ggml-cpu.cpp tests), while the bare -march=sapphirerapids does.
func TestArchFlagsDefineNoAMX(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("SKIP: the x86-64 targets need an x86-64 compiler")
	}
	cc := testutil.Tool(t, "gcc", "the architecture flags against the real compiler")
	macros := func(flags []string) string {
		args := append(append([]string{}, flags...), "-dM", "-E", "-x", "c", os.DevNull)
		out, err := exec.Command(cc, args...).Output()
		if err != nil {
			t.Fatalf("%s %q: %v", cc, args, err)
		}
		return string(out)
	}
	if !strings.Contains(macros([]string{"-march=sapphirerapids"}), "__AMX_INT8__") {
		t.Fatal("-march=sapphirerapids defines no __AMX_INT8__: this compiler cannot show the check works")
	}
	for _, target := range []string{"native", "x86-64-v2", "x86-64-v3", "x86-64-v4", "sapphirerapids", "znver4", "alderlake"} {
		flags := archFlags(t, target, "")
		if m := macros(flags); strings.Contains(m, "__AMX") {
			t.Errorf("%s: %q still defines AMX macros", target, flags)
		}
	}
}
