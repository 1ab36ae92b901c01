package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// generated is what the language model's "generated" debug line says of
// one request: its prompt, and its candidates' decodes by the number of
// sequences each ran (gen_steps_by_seqs[k]).
type generated struct {
	PromptTokens int   `json:"prompt_tokens"`
	CachedTokens int   `json:"dialog_cached_tokens"`
	GenMS        int64 `json:"generation_ms"`
	PromptMS     int64 `json:"prompt_ms"`
	StepsBySeqs  []int `json:"gen_steps_by_seqs"`
	// GenDecodeMS is the part of GenMS spent inside llama.cpp's decodes.
	GenDecodeMS int64 `json:"gen_decode_ms"`
}

// logLines returns the lines of a server's JSON log (REPLYD_LOG_FORMAT=json,
// REPLYD_LOG_LEVEL=debug) whose message is msg, decoded into T, and the
// first error met: a line that does not decode is left out.
func logLines[T any](log, msg string) ([]T, error) {
	var out []T
	var first error
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"msg":"`+msg+`"`) {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			if first == nil {
				first = fmt.Errorf("a %s line: %w", msg, err)
			}
			continue
		}
		out = append(out, v)
	}
	if first == nil {
		first = sc.Err()
	}
	return out, first
}

// lastGenerated returns the last "generated" line of a server's log, and
// how many it holds.
func lastGenerated(log string) (generated, int, error) {
	gs, err := logLines[generated](log, "generated")
	if err != nil || len(gs) == 0 {
		return generated{}, 0, err
	}
	return gs[len(gs)-1], len(gs), nil
}

// stepTable is `replyd models steps`' answer: stepUS[i][k] is the median
// step of k sequences after context[i] prompt tokens.
type stepTable struct {
	Context []int     `json:"context"`
	StepUS  [][]int64 `json:"step_us"`
}

// measureSteps runs `bin models steps` for the given prompt lengths.
func measureSteps(ctx context.Context, bin, model string, seqs int, contexts []int, rounds int) (stepTable, error) {
	cs := slices.Clone(contexts)
	slices.Sort(cs)
	cs = slices.Compact(cs)
	strs := make([]string, len(cs))
	for i, c := range cs {
		strs[i] = strconv.Itoa(c)
	}
	cmd := exec.CommandContext(ctx, bin, "models", "steps", "--model", model, "--seqs", strconv.Itoa(seqs),
		"--contexts", strings.Join(strs, ","), "--rounds", strconv.Itoa(rounds))
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return stepTable{}, fmt.Errorf("replyd models steps: %w: %s", err, ee.Stderr)
		}
		return stepTable{}, fmt.Errorf("replyd models steps: %w", err)
	}
	var t stepTable
	if err := json.Unmarshal(out, &t); err != nil {
		return stepTable{}, fmt.Errorf("replyd models steps: %w", err)
	}
	return t, nil
}

// reference is the time the decodes of g would take at the reference step
// times, in ms: for every k, the decodes of k sequences times the step of
// k sequences at g's prompt length.
func (t stepTable) reference(g generated) float64 {
	i := slices.Index(t.Context, g.PromptTokens)
	if i < 0 {
		return 0
	}
	us := 0.0
	for k, n := range g.StepsBySeqs {
		if k > 0 && k < len(t.StepUS[i]) {
			us += float64(n) * float64(t.StepUS[i][k])
		}
	}
	return us / 1000
}

// rounds sums a generation's decodes.
func (g generated) rounds() int {
	n := 0
	for _, s := range g.StepsBySeqs {
		n += s
	}
	return n
}
