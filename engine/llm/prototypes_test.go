package llm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPrototypesMatchLlamaH compares the llama.cpp prototypes declared by
// hand in cgo.go, abort.go and context.go with llama.h of the ollama module in go.mod: the same
// return type and parameter types (names aside, typedefs resolved). C links
// by name only, so after an ollama upgrade that changed one of them the
// build would succeed and the call would break at run time; this test
// fails instead, naming the function.
func TestPrototypesMatchLlamaH(t *testing.T) {
	var preamble string
	for _, f := range []string{"cgo.go", "abort.go", "context.go", "sysinfo.go"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		preamble += s[strings.Index(s, "/*"):strings.Index(s, "*/")] + "\n"
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
	if err != nil {
		t.Fatalf("locating the ollama module: %v", err)
	}
	header, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "llama", "llama.cpp", "include", "llama.h"))
	if err != nil {
		t.Fatal(err)
	}

	decl := regexp.MustCompile(`(?s)(?:^|\n)\s*(?:LLAMA_API\s+)?([A-Za-z_][\w\s*]*?)\s*\b(llama_\w+)\s*\(([^;{]*?)\)\s*;`)
	ours := map[string][2]string{}
	for _, m := range decl.FindAllStringSubmatch(preamble, -1) {
		ours[m[2]] = [2]string{m[1], m[3]}
	}
	if len(ours) < 15 {
		t.Fatalf("found %d prototypes in the preambles of cgo.go, abort.go, context.go and sysinfo.go, want the 15 they declare", len(ours))
	}
	theirs := map[string][2]string{}
	for _, m := range decl.FindAllStringSubmatch(string(header), -1) {
		if strings.Contains(m[0], "LLAMA_API") && !strings.Contains(m[0], "DEPRECATED") {
			theirs[m[2]] = [2]string{m[1], m[3]}
		}
	}
	for name, o := range ours {
		h, ok := theirs[name]
		if !ok {
			t.Errorf("%s: not declared in llama.h any more", name)
			continue
		}
		if got, want := typeOf(o[0]), typeOf(h[0]); got != want {
			t.Errorf("%s returns %q in our preamble, %q in llama.h", name, got, want)
		}
		if got, want := paramTypes(o[1]), paramTypes(h[1]); got != want {
			t.Errorf("%s takes (%s) in our preamble, (%s) in llama.h", name, got, want)
		}
	}
	// The message struct is laid out as cgo.go declares it.
	if !regexp.MustCompile(`struct llama_chat_message \{\s*const char \* role;\s*const char \* content;\s*\}`).Match(header) {
		t.Error("llama.h's struct llama_chat_message is no longer {role, content}")
	}
}

// aliases resolve the typedefs llama.h uses to what our preambles spell out.
var aliases = map[string]string{
	"llama_token":         "int32_t",
	"llama_seq_id":        "int32_t",
	"ggml_log_callback":   "replyd_log_callback",
	"ggml_abort_callback": "replyd_abort_callback",
}

// typeOf normalises a C type: one space between tokens, typedefs resolved.
func typeOf(s string) string {
	s = strings.NewReplacer("*", " * ").Replace(s)
	f := strings.Fields(s)
	for i, w := range f {
		if a, ok := aliases[w]; ok {
			f[i] = a
		}
	}
	return strings.Join(f, " ")
}

// paramTypes drops the parameter names of a parameter list.
func paramTypes(list string) string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		f := strings.Fields(strings.NewReplacer("*", " * ").Replace(p))
		if len(f) > 1 && f[len(f)-1] != "*" {
			f = f[:len(f)-1] // the name
		}
		out = append(out, typeOf(strings.Join(f, " ")))
	}
	return strings.Join(out, ", ")
}
