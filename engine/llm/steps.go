package llm

import (
	"context"
	"errors"
	"slices"
	"time"
)

// StepTimes returns the median time of one decode step of k sequences
// after a prompt of n tokens, for every n in contexts and k in 1..seqs:
// times[i][k] is the step of k sequences after contexts[i] tokens (index 0
// unused). It is the reference a going-on turn's generation is compared
// with (cmd/benchlatency): each sequence holds the prompt's cells, shared
// as the candidates share them, and nothing else, so the step costs only
// the weights and attention over those cells. The prompt is evaluated once,
// growing to each length in turn, and every size of step is timed rounds
// times, the sizes alternating. It runs on the owner goroutine, between
// requests, and leaves the context empty of its cells.
func (e *Engine) StepTimes(ctx context.Context, seqs int, contexts []int, rounds int) ([][]time.Duration, error) {
	seqs = min(max(seqs, 1), e.opts.MaxCandidates)
	rounds = max(rounds, 1)
	if len(contexts) == 0 {
		return nil, errors.New("no context to time a step after")
	}
	longest := slices.Max(contexts)
	var out [][]time.Duration
	err := e.measure(ctx, longest, longest+1, "a context", func(r *run, tokens []int) (err error) {
		out, err = e.stepTimes(r, tokens, seqs, contexts, rounds)
		return err
	})
	return out, err
}

func (e *Engine) stepTimes(r *run, tokens []int, seqs int, contexts []int, rounds int) ([][]time.Duration, error) {
	defer e.freeGen()
	times := make([][]time.Duration, len(contexts))
	evaluated := 0
	for i, n := range contexts {
		if n > evaluated {
			if _, err := e.evalPrompt(r, promptSeq, tokens[:n], evaluated, false); err != nil {
				return nil, err
			}
			evaluated = n
		} else if n < evaluated {
			return nil, errors.New("contexts must grow")
		}
		for k := 0; k < seqs; k++ {
			e.lctx.KvCacheSeqCp(promptSeq, e.genSeqs[k], -1, -1)
			e.genLen[k] = n
		}
		samples := make([][]time.Duration, seqs+1)
		for round := 0; round < rounds; round++ {
			for k := 1; k <= seqs; k++ {
				e.batch.Clear()
				for s := 0; s < k; s++ {
					e.batch.Add(tokens[n-1-s], nil, n, true, e.genSeqs[s])
				}
				t0 := time.Now()
				if err := r.decode(); err != nil {
					return nil, err
				}
				samples[k] = append(samples[k], time.Since(t0))
				for s := 0; s < k; s++ {
					e.lctx.KvCacheSeqRm(e.genSeqs[s], n, -1)
				}
			}
		}
		times[i] = make([]time.Duration, seqs+1)
		for k := 1; k <= seqs; k++ {
			slices.Sort(samples[k])
			times[i][k] = samples[k][len(samples[k])/2]
		}
		e.freeGen()
	}
	return times, nil
}

// measure runs fn on the owner goroutine, queued like a request, with the
// first n tokens of the filler prompt and a run of the configured threads,
// the dialog in the context left before fn and after it: how StepTimes and
// Greedy measure. need is the most cells fn evaluates in one sequence: more
// than the prompt budget is refused ("what is longer than the prompt
// budget") before anything is queued.
func (e *Engine) measure(ctx context.Context, n, need int, what string, fn func(r *run, tokens []int) error) error {
	if need > e.budget() {
		return errors.New(what + " is longer than the prompt budget")
	}
	j := &job{ctx: ctx, queued: time.Now(), res: make(chan jobResult, 1), fn: func() error {
		tokens, err := e.fillerTokens(n)
		if err != nil {
			return err
		}
		r := &run{e: e, ctx: ctx, minThreads: e.opts.Threads}
		defer r.release()
		e.leaveCurrent()
		defer e.leaveCurrent()
		return fn(r, tokens)
	}}
	if err := e.enqueue(j); err != nil {
		return err
	}
	// The owner notices a cancelled ctx before its next decode.
	return (<-j.res).err
}

// fillerTokens is n tokens of an everyday sentence repeated: the prompt
// the reference steps and Greedy are measured after.
func (e *Engine) fillerTokens(n int) ([]int, error) {
	text := "The physiotherapist comes at ten, and after lunch we could walk to the park if the rain stops. "
	var tokens []int
	for len(tokens) < n {
		t, err := e.model.Tokenize(text, false, true)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, t...)
	}
	return tokens[:n], nil
}
