package models

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/score"
	"github.com/replyd/replyd/engine/steer"
)

// How a comparison gives way: a replay stopped for a request waits
// compareBackoff and runs again, at most compareRetries times.
const (
	compareBackoff = 300 * time.Millisecond
	compareRetries = 200
)

// compareSeed is the first turn's sampling seed; turn k uses
// compareSeed+k on both models, so that a comparison run twice gives the
// same figures and both models draw with the same seeds.
const compareSeed = 1

// compareSteerSims are the simulated users that replay a steered turn,
// by its logged steering mode: the constraint the user typed is not
// logged, only the mode (replyd eval --steer's rules, steer.ParseSim).
var compareSteerSims = map[string]string{
	string(engine.SteerWords):   "words",
	string(engine.SteerPrefix):  "prefix:3",
	string(engine.SteerReplace): "replace",
}

// BeginCompare checks, without loading anything, that the language model
// file path of kind can be compared now: it takes the Service's one model
// action (one switch, timing or comparison at a time) from now until the
// returned run returns, and checks that the file fits beside the active
// model (PlanSwitch's rule, as a timing). Errors wrap ErrBusy,
// ErrCompareNoRoom, ErrUnusable or ErrNotSupported. The caller must call
// the run exactly once: it loads the candidate with the active model's
// settings, replays the turns and frees it.
func (s *Service) BeginCompare(kind, path string) (CompareRun, error) {
	if !s.CanCompare() {
		return nil, ErrNotSupported
	}
	if kind != "llm" {
		return nil, fmt.Errorf("%w: kind %q: a comparison replays language models only", ErrUnusable, kind)
	}
	a, release, err := s.beginAction(kind, path)
	if err != nil {
		return nil, err
	}
	plan, err := a.plan("beside")
	if err != nil {
		release()
		return nil, fmt.Errorf("%w: %s", ErrCompareNoRoom, TimeRoomReason(plan, a.availErr, a.state.GPU))
	}
	reason := fmt.Sprintf("the model needs about %d MiB and %d MiB are available: it was compared beside the active one", plan.BytesNeeded>>20, plan.BytesAvailable>>20)
	return func(ctx context.Context, turns []CompareTurn, progress func(done, total int)) (CompareResult, error) {
		defer release()
		res, err := s.compareLLM(ctx, path, turns, progress)
		res.Reason = reason
		return res, err
	}, nil
}

// compareLLM opens the candidate with the active model's options (its own
// timings at idle priority) and replays every turn through both,
// alternating, at PrioritySpeculative.
func (s *Service) compareLLM(ctx context.Context, path string, turns []CompareTurn, progress func(done, total int)) (CompareResult, error) {
	log := s.log.With("comparing", filepath.Base(path))
	cand, err := s.llm.OpenIdle(path)
	if err != nil {
		return CompareResult{}, loadError(err)
	}
	defer cand.Close()
	act, release, err := s.llm.Active()
	if err != nil {
		return CompareResult{}, errors.New("the active language model is unloaded")
	}
	defer release()
	t0 := s.now()
	res, err := replayTurns(ctx, s.cpu, []engine.Generator{act, cand}, turns, progress)
	if err != nil {
		return res, err
	}
	res.Active.Model, res.Candidate.Model = act.Status().Model, path
	log.Info("model compared", "turns", len(turns), "ms", s.now().Sub(t0).Milliseconds(), "preempted", res.Preempted)
	return res, nil
}

// compareTally sums one model's replays.
type compareTally struct {
	score.Ranking
	turns, near       int
	steered, hits     int
	sChars, sActions  int
	turnTime          time.Duration
	genTokens, genCnt int
}

// replayTurns replays turns through gens (the active model and the
// candidate), one turn on both before the next, the first of the two in
// turn (the active one on even turns), so that both meet the same load and
// neither always follows the other, and scores them.
func replayTurns(ctx context.Context, cpu *engine.Scheduler, gens []engine.Generator, turns []CompareTurn, progress func(done, total int)) (CompareResult, error) {
	var res CompareResult
	total := 0
	for _, t := range turns {
		total += len(gens)
		if _, ok := compareSteerSims[t.SteerMode]; ok {
			total += len(gens)
		}
	}
	tallies := make([]compareTally, len(gens))
	done := 0
	for k, t := range turns {
		req := engine.GenerateRequest{SystemPrompt: t.SystemPrompt, Messages: []engine.Message{{Role: engine.RoleSpeaker, Content: t.Partner}},
			N: t.Candidates, Temperature: t.Temperature, Seed: compareSeed + uint32(k)}
		for j := range gens {
			i := (j + k) % len(gens)
			gen, took, err := idleGenerate(ctx, cpu, gens[i], req, &res.Preempted)
			if err != nil {
				return res, err
			}
			tl := &tallies[i]
			tl.Add(score.Rank(texts(gen.Candidates), t.Reply))
			tl.turns++
			if nearHit(gen.Candidates, t.Reply) {
				tl.near++
			}
			tl.turnTime += took
			tl.genTokens += gen.GenTokens
			tl.genCnt += len(gen.Candidates)
			done++
			progress(done, total)
		}
		mode, steered := compareSteerSims[t.SteerMode]
		if !steered {
			continue
		}
		sim, err := steer.ParseSim(mode)
		if err != nil {
			return res, err
		}
		st, keys, ok := sim.Make(t.Reply)
		for j := range gens {
			i := (j + k) % len(gens)
			tl := &tallies[i]
			if ok {
				sreq := req
				sreq.Steer = &st
				gen, _, err := idleGenerate(ctx, cpu, gens[i], sreq, &res.Preempted)
				if err != nil {
					return res, err
				}
				chars, actions, hit := steeredActions(texts(gen.Candidates), t.Reply, keys)
				tl.steered++
				tl.sChars += chars
				tl.sActions += actions
				if hit {
					tl.hits++
				}
			}
			done++
			progress(done, total)
		}
	}
	figs := make([]CompareFigures, len(gens))
	for i, tl := range tallies {
		figs[i] = tl.figures()
	}
	res.Active, res.Candidate = figs[0], figs[len(figs)-1]
	return res, nil
}

// figures turns a tally into the API's figures.
func (tl compareTally) figures() CompareFigures {
	top1, topN, _, saving := tl.Rates(tl.turns)
	f := CompareFigures{Turns: tl.turns, ExactRate: topN, Top1Rate: top1,
		KeystrokesSaved: tl.Saved, KeystrokesTyped: tl.Typed, KeystrokeSaving: round3(saving),
		SteeredTurns: tl.steered, SteeredHits: tl.hits}
	if tl.turns > 0 {
		f.NearRate = float64(tl.near) / float64(tl.turns)
		f.TurnMS = math.Round(float64(tl.turnTime.Microseconds())/float64(tl.turns)/100) / 10
	}
	if tl.genCnt > 0 {
		f.ReplyTokens = math.Round(float64(tl.genTokens)/float64(tl.genCnt)*10) / 10
	}
	if tl.sChars > 0 {
		f.SteeredKSR = round3(float64(tl.sChars-tl.sActions) / float64(tl.sChars))
	}
	f.ExactRate, f.Top1Rate, f.NearRate = round3(f.ExactRate), round3(f.Top1Rate), round3(f.NearRate)
	return f
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func texts(cs []engine.Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Text
	}
	return out
}

// nearHit reports whether a candidate is within one word of reply
// (score.WordEditDistance <= 1: one word added, dropped or changed; case
// and punctuation ignored).
func nearHit(cs []engine.Candidate, reply string) bool {
	for _, c := range cs {
		if score.WordEditDistance(c.Text, reply) <= 1 {
			return true
		}
	}
	return false
}

// steeredActions is replyd eval --steer's rule for one steered replay: the
// simulated user pressed keys to steer; when the reply is among the
// candidates it takes it (one selection), else it types it whole.
func steeredActions(cands []string, reply string, keys int) (chars, actions int, hit bool) {
	chars = score.Chars(steer.Clean(reply))
	want := score.Normalize(reply)
	for _, c := range cands {
		if score.Normalize(c) == want {
			return chars, keys + 1, true
		}
	}
	return chars, keys + chars, false
}

// idleGenerate runs req on g as speculative work: its cores are taken at
// PrioritySpeculative and it is canceled as soon as a request waits for
// cores or queues for the language model (Scheduler.BeginSpeculative); it
// is then run again after compareBackoff, counted in preempted. It returns
// the generation and its time (prompt and candidates).
func idleGenerate(ctx context.Context, cpu *engine.Scheduler, g engine.Generator, req engine.GenerateRequest, preempted *int) (engine.Generation, time.Duration, error) {
	for try := 0; ; try++ {
		gen, err := idleGenerateOnce(ctx, cpu, g, req)
		if err == nil {
			return gen, gen.Prompt + gen.Generation, nil
		}
		if ctx.Err() != nil {
			return gen, 0, ctx.Err()
		}
		k := engine.KindOf(err)
		if k != engine.KindCanceled && k != engine.KindOverloaded {
			return gen, 0, err
		}
		*preempted++
		if try >= compareRetries {
			return gen, 0, errors.New("the box kept serving requests: every replay was stopped for one; compare when the tablets are quieter")
		}
		select {
		case <-ctx.Done():
			return gen, 0, ctx.Err()
		case <-time.After(compareBackoff):
		}
	}
}

func idleGenerateOnce(ctx context.Context, cpu *engine.Scheduler, g engine.Generator, req engine.GenerateRequest) (engine.Generation, error) {
	ctx, cancel := context.WithCancel(engine.WithPriority(ctx, engine.PrioritySpeculative))
	defer cancel()
	defer cpu.BeginSpeculative(cancel)()
	return g.Generate(ctx, req)
}
