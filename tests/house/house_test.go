// Package house checks the rules of the house that no compiler enforces:
// every package is seen by ./..., engine's tests compile no cgo, and the
// tests share one process harness and one WAV writer.
package house

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// goFiles returns the repository's .go files (relative, slash-separated),
// leaving out node_modules and the like.
func goFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(root, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// TestEveryPackageIsVisible: every directory with Go files is a package of
// ./..., so go vet and go test see it. (The go command leaves out
// directories named testdata or starting with _ or .)
func TestEveryPackageIsVisible(t *testing.T) {
	listed := goList(t, "-f", "{{.Dir}}", "./...")
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range goFiles(t) {
		dir := filepath.Join(abs, filepath.FromSlash(filepath.Dir(f)))
		if !slices.Contains(listed, dir) {
			t.Errorf("%s is in a directory that ./... does not list: go vet and go test never see it", f)
		}
	}
}

// TestEngineTestsCompileNoCgo: engine's own tests (and engine/audio's)
// import neither cgo leaf; tests of the pipeline on the real engines live
// in tests/pipeline.
func TestEngineTestsCompileNoCgo(t *testing.T) {
	for _, pkg := range []string{"./engine", "./engine/audio", "./api"} {
		deps := goList(t, "-test", "-deps", pkg)
		for _, leaf := range []string{"github.com/replyd/replyd/engine/llm", "github.com/replyd/replyd/engine/whisper"} {
			if slices.Contains(deps, leaf) {
				t.Errorf("the tests of %s compile %s", pkg, leaf)
			}
		}
	}
}

// TestOneHarnessOneWAVWriter: only internal/replydproc starts `replyd
// serve`, and only internal/testaudio writes WAV headers.
func TestOneHarnessOneWAVWriter(t *testing.T) {
	serve := regexp.MustCompile(`exec\.Command(Context)?\([^)]*"serve"`)
	riff := regexp.MustCompile(`WriteString\("RIFF"\)|"RIFF\\x00\\x00\\x00\\x00WAVE"`)
	for _, f := range goFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(f, "internal/replydproc/") && serve.Match(b) {
			t.Errorf("%s starts `replyd serve` itself: use internal/replydproc (or testutil.StartReplyd)", f)
		}
		if !strings.HasPrefix(f, "internal/testaudio/") && riff.Match(b) {
			t.Errorf("%s writes a WAV header itself: use internal/testaudio", f)
		}
	}
}

// TestDatabaseDriversStayInTheirStores: only store/bolt imports bbolt and only
// store/postgres (and internal/pgtest, which starts PostgreSQL for tests)
// imports pgx; everything else reaches state through store.Store.
func TestDatabaseDriversStayInTheirStores(t *testing.T) {
	allowed := map[string][]string{
		"go.etcd.io/bbolt":        {"github.com/replyd/replyd/store/bolt"},
		"github.com/jackc/pgx/v5": {"github.com/replyd/replyd/store/postgres", "github.com/replyd/replyd/internal/pgtest"},
	}
	for _, line := range goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, "./...") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Split(imports, ",") {
			for driver, who := range allowed {
				if (imp == driver || strings.HasPrefix(imp, driver+"/")) && !slices.Contains(who, pkg) {
					t.Errorf("%s imports %s: only %v may", pkg, imp, who)
				}
			}
		}
	}
}

// TestOnlyCmdChoosesTheStore: the store implementations (store/bolt,
// store/postgres) are imported only by cmd/replyd, which opens one; every
// other package takes a store.Store, and the contract package imports
// neither implementation.
func TestOnlyCmdChoosesTheStore(t *testing.T) {
	impls := []string{"github.com/replyd/replyd/store/bolt", "github.com/replyd/replyd/store/postgres"}
	for _, line := range goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, "./...") {
		pkg, imports, _ := strings.Cut(line, ":")
		if pkg == "github.com/replyd/replyd/cmd/replyd" {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if slices.Contains(impls, imp) {
				t.Errorf("%s imports %s: only cmd/replyd chooses the store", pkg, imp)
			}
		}
	}
}
