package llm

import (
	"context"
	"testing"
)

// TestStepTimes: the reference steps are timed for every length and number
// of sequences, leave no cells behind, and a request served afterwards
// starts from an empty prompt sequence.
func TestStepTimes(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 4, ContextPerSeq: 256, MaxCandidates: 3, Decoding: DecodeBatched})
	times, err := e.StepTimes(context.Background(), 3, []int{20, 60}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 2 {
		t.Fatalf("%d rows, want 2", len(times))
	}
	for i, row := range times {
		if len(row) != 4 {
			t.Fatalf("row %d has %d entries, want 4", i, len(row))
		}
		for k := 1; k <= 3; k++ {
			if row[k] <= 0 {
				t.Errorf("context %d, %d sequences: step %v", i, k, row[k])
			}
		}
	}
	if _, err := e.StepTimes(context.Background(), 1, []int{1000}, 1); err == nil {
		t.Error("a context beyond the prompt budget was timed")
	}
	g := mustGenerate(t, e, request(2, 2))
	if g.CachedTokens != 0 {
		t.Errorf("the request after StepTimes reused %d cached tokens", g.CachedTokens)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.StepTimes(ctx, 1, []int{20}, 1); err == nil {
		t.Error("a cancelled StepTimes succeeded")
	}
}
