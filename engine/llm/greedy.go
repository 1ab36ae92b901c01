package llm

import (
	"context"
	"errors"
	"math"
)

// GreedyToken is one token of a greedy continuation: the token chosen (the
// largest logit), its logit, and its lead over the runner-up. Two backends
// (a GPU and the CPU) that compute the same function choose the same
// tokens wherever the lead is larger than their rounding differences.
type GreedyToken struct {
	Token  int     `json:"token"`
	Logit  float32 `json:"logit"`
	Margin float32 `json:"margin"`
}

// Greedy evaluates the filler prompt of n tokens the reference steps use
// and continues it greedily for m tokens, one decode each, without a
// sampler: the raw argmax of the model's logits. It compares backends
// (scripts/gpu-check.sh through `replyd models steps --greedy`), and leaves
// no cells behind.
func (e *Engine) Greedy(ctx context.Context, n, m int) ([]GreedyToken, error) {
	if n < 1 || m < 1 {
		return nil, errors.New("greedy: the prompt and the continuation need a token at least")
	}
	var out []GreedyToken
	err := e.measure(ctx, n, n+m, "greedy: the prompt with its continuation", func(r *run, tokens []int) (err error) {
		out, err = e.greedy(r, tokens, m)
		return err
	})
	return out, err
}

func (e *Engine) greedy(r *run, tokens []int, m int) ([]GreedyToken, error) {
	logits, err := e.evalPrompt(r, promptSeq, tokens, 0, true)
	if err != nil {
		return nil, err
	}
	out := make([]GreedyToken, 0, m)
	for {
		best, second := argmax2(logits)
		out = append(out, GreedyToken{Token: best, Logit: logits[best], Margin: logits[best] - logits[second]})
		if len(out) == m {
			return out, nil
		}
		tokens = append(tokens, best)
		if logits, err = e.evalPrompt(r, promptSeq, tokens, len(tokens)-1, true); err != nil {
			return nil, err
		}
	}
}

// argmax2 returns the indices of the largest and the second largest value
// (the lower index first among equals).
func argmax2(v []float32) (best, second int) {
	hi, lo := float32(math.Inf(-1)), float32(math.Inf(-1))
	best, second = 0, 0
	for i, x := range v {
		switch {
		case x > hi:
			second, lo = best, hi
			best, hi = i, x
		case x > lo:
			second, lo = i, x
		}
	}
	return best, second
}
