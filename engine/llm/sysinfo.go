package llm

/*
const char * llama_print_system_info(void);
*/
import "C"

import "strings"

// CPUFeatures lists the CPU features ggml's CPU backend was compiled for
// and uses, as llama_print_system_info reports them ("SSE3 = 1 | AVX2 = 1
// …"): the names whose value is 1, e.g. "SSE3 SSSE3 AVX AVX2 F16C FMA
// AVX512". These are fixed when replyd is built (-march of the build).
func CPUFeatures() string { return parseSystemInfo(C.GoString(C.llama_print_system_info())) }

// parseSystemInfo keeps the "NAME = 1" entries of llama_print_system_info's
// text, in order, once each.
func parseSystemInfo(s string) string {
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, "|") {
		if i := strings.LastIndex(part, ":"); i >= 0 {
			part = part[i+1:] // "CPU : SSE3 = 1" starts a backend's list
		}
		name, val, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if ok && strings.TrimSpace(val) == "1" && name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return strings.Join(out, " ")
}
