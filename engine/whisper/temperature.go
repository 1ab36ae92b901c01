package whisper

import (
	"context"
	"math"
	"time"

	"github.com/replyd/replyd/engine"
)

// whisper.cpp's decoding safeguards (whisper_full_with_state and
// whisper_full_default_params in src/whisper.cpp, at the commit the
// conformance data names), with its default values.
const (
	// temperatureInc: a window that fails is decoded again at 0.2, 0.4, ...
	// up to 1.0 ("a set of temperatures to use": t < 1.0f + 1e-6f).
	temperatureInc = 0.2
	// entropyThold: a result longer than 32 tokens whose last 32 tokens have
	// an entropy below this is a repetition loop ("failed due to entropy").
	entropyThold = 2.4
	// bestOf: decoders sampled at each temperature above 0 (greedy.best_of).
	bestOf = 5
	// historyTempCutoff: at this temperature and above the previous
	// windows' text is left out of the prompt
	// (WHISPER_HISTORY_CONDITIONING_TEMP_CUTOFF).
	historyTempCutoff = 0.5
)

// Token cap per window. whisper.cpp has none below n_text_ctx/2 - 4
// (220 tokens), so a repetition loop in a short recording runs to 220
// tokens at every temperature. replyd caps a window at 32 plus 12 tokens
// per second of audio in it (engine.WindowTokenCap, which the language
// model's transcript reserve also uses). Fast conversational English is
// about 3-4 words a second, 4-5 tokens a second with punctuation
// (spelled-out letters and digits at most 6-7), so 12 a second never cuts
// real speech; the 32 tokens of the base let the entropy rule, which needs
// more than 32 tokens, see a loop even in the shortest window. The cap is on
// with or without the fallback, and the conformance data passes under it
// (its max_tokens 31 is below the cap of every clip).

// tokenCap returns the token cap of a window holding n samples.
func tokenCap(n int) int {
	return engine.WindowTokenCap(time.Duration(n) * time.Second / SampleRate)
}

// temperatures returns whisper.cpp's temperature schedule: 0 alone without
// the fallback, else 0, 0.2, ..., 1.0 accumulated in float32 as its loop does.
func temperatures(fallback bool) []float32 {
	if !fallback {
		return []float32{0}
	}
	var out []float32
	for t := float32(0); t < 1.0+1e-6; t += temperatureInc {
		out = append(out, t)
	}
	return out
}

// attempt is one decoder's result at one temperature.
type attempt struct {
	windowResult
	failed bool    // the entropy rule or the loop rule failed it
	score  float64 // mean log-probability (length_penalty -1), -Inf when failed by the loop rule
}

// entropy is whisper_sequence_score's entropy of the last 32 tokens.
func entropy(tokens []int) float64 {
	n := len(tokens)
	tail := tokens[max(0, n-32):]
	counts := map[int]int{}
	for _, t := range tail {
		counts[t]++
	}
	var e float64
	for _, c := range counts {
		p := float64(c) / float64(len(tail))
		e -= p * math.Log(p)
	}
	return e
}

// judge applies whisper.cpp's rules to a finished decoder: the loop rule
// (no <|endoftext|> within n_max tokens: failed, never scored) and the
// entropy rule (more than 32 tokens, entropy below 2.4: failed, scored).
func (m *Model) judge(w windowResult, nMax int) attempt {
	a := attempt{windowResult: w, score: math.Inf(-1)}
	n := len(w.tokens)
	if n == 0 || (w.tokens[n-1] != m.tok.eot && n >= nMax) {
		a.failed = true
		a.avgLogprob = math.Inf(-1)
		return a
	}
	a.score = w.avgLogprob
	if n > 32 && entropy(w.tokens) < entropyThold {
		a.failed = true
	}
	return a
}

// decoders holds the random generators of one transcription's decoders.
type decoders []*mt19937

func newDecoders() decoders {
	d := decoders{newMT19937(5489)}
	for j := 1; j < bestOf; j++ {
		d = append(d, newMT19937(uint32(j)))
	}
	return d
}

// fallbackWindow decodes one window as whisper_full does with the
// temperature fallback: greedily at 0, then with bestOf sampled decoders at
// each higher temperature, until the best decoder passes (not failed, and
// not a mean log-probability below -1 while the no-speech probability is
// below 0.6) or the temperatures run out; the last temperature's best
// decoder is kept even when it failed, as whisper.cpp keeps it. It returns
// the result, the history its prompt carried (none when the kept attempt
// ran at 0.5 or above: whisper.cpp then starts the next window's history
// afresh) and the number of tokens all attempts decoded.
//
// The safety net: full, when not nil, encodes the window again at the full
// window (st was encoded at a shortened audio_ctx). A greedy result that
// fails those tests is then decoded again, greedily, on the full window
// before any higher temperature, and the rest of the fallback runs there:
// a shortened window may make a window faster, never worse than the full
// window by whisper.cpp's own tests. A result cut by the administrator's
// token cap (Options.MaxTokensPerWindow) is not a failure for the net.
func (m *Model) fallbackWindow(ctx context.Context, st *decState, seek int, prev []int, lang, maxTokens int,
	temps []float32, rngs decoders, full func() (*decState, error)) (windowResult, []int, int, error) {
	nMax := min(m.hp.NTextCtx/2-4, maxTokens)
	best := 0
	var kept attempt
	var history []int
	decoded := 0
	net := false
	for it := 0; it < len(temps); it++ {
		t := temps[it]
		hist := prev
		if t >= historyTempCutoff {
			hist = nil
		}
		var cands []attempt
		if t == 0 {
			w, err := m.greedyWindow(ctx, st, seek, hist, lang, nMax)
			if err != nil {
				return w, nil, 0, err
			}
			cands = append(cands, m.judge(w, m.hp.NTextCtx/2-4))
		} else {
			ws, err := m.sampleWindow(ctx, st, seek, hist, lang, nMax, t, rngs)
			if err != nil {
				return windowResult{}, nil, 0, err
			}
			for _, w := range ws {
				cands = append(cands, m.judge(w, m.hp.NTextCtx/2-4))
			}
		}
		// Rank as whisper.cpp does: the highest score among the decoders
		// that did not fail; when all failed the previous best index stays.
		for _, c := range cands {
			decoded += len(c.tokens)
		}
		bestScore := math.Inf(-1)
		for j, c := range cands {
			if !c.failed && bestScore < c.score {
				bestScore, best = c.score, j
			}
		}
		kept = cands[min(best, len(cands)-1)]
		kept.temperature, kept.attempts = float64(t), it+1
		history = hist
		passed := !kept.failed && !(kept.avgLogprob < logprobThold && kept.noSpeechProb < noSpeechThold)
		if t == 0 && full != nil && !passed && !m.adminCut(kept.windowResult) {
			short := st.ctx
			var err error
			if st, err = full(); err != nil {
				return windowResult{}, nil, 0, err
			}
			m.netFired.Add(1)
			m.log.Debug("shortened encoder window failed the fallback's tests: decoding again at the full window",
				"audio_ctx", short, "failed", kept.failed, "avg_logprob", kept.avgLogprob, "tokens", len(kept.tokens))
			full, net, best = nil, true, 0
			it-- // temperature 0 again, on the full window
			continue
		}
		if it == len(temps)-1 || passed {
			break
		}
	}
	w := kept.windowResult
	w.failed = kept.failed
	w.net = net
	w.noSpeech = w.noSpeechProb > noSpeechThold && w.avgLogprob < logprobThold
	if w.noSpeech {
		w.text = nil
	}
	return w, history, decoded, nil
}

// adminCut reports whether w ended at the administrator's token cap
// (Options.MaxTokensPerWindow) without <|endoftext|>.
func (m *Model) adminCut(w windowResult) bool {
	n := len(w.tokens)
	return m.opts.MaxTokensPerWindow > 0 && n >= m.maxTok && (n == 0 || w.tokens[n-1] != m.tok.eot)
}

// sampleWindow decodes one window with bestOf decoders sampling at
// temperature t (whisper_process_logits divides the logits by t;
// whisper_sample_token draws from the resulting probabilities over the
// allowed ids). The prompt is decoded once; each decoder reuses its K/V.
func (m *Model) sampleWindow(ctx context.Context, st *decState, seek int, prev []int, lang, limit int, t float32,
	rngs decoders) ([]windowResult, error) {
	var prompt []int
	if len(prev) > 0 {
		prompt = append([]int{m.tok.prev}, prev...)
	}
	sotPos := len(prompt)
	prompt = append(prompt, m.startPrompt(max(lang, 0))...)
	st.reset()
	hidden, err := m.decode(st, prompt)
	if err != nil {
		return nil, err
	}
	d := m.hp.NTextState
	sotLogits, err := m.logits(hidden[sotPos*d : (sotPos+1)*d])
	if err != nil {
		return nil, err
	}
	noSpeech := softmaxAt(sotLogits, m.tok.nosp)
	first := append([]float32(nil), hidden[(len(prompt)-1)*d:len(prompt)*d]...)
	limit = min(limit, m.hp.NTextCtx-len(prompt))
	out := make([]windowResult, 0, bestOf)
	probs := make([]float32, m.tok.eot+1)
	for j := range bestOf {
		w := windowResult{seek: seek, prompt: prompt, noSpeechProb: noSpeech}
		st.n = len(prompt) // the prompt's K/V stay; later positions are overwritten
		last := first
		var sum float64
		for i := 0; i < limit; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			lg, err := m.textLogits(last)
			if err != nil {
				return nil, err
			}
			lp := scaledLogprobs(lg, t, i == 0, m.tok.eot, m.tok.space, probs)
			id := rngs[j].discrete(probs)
			sum += lp[id]
			w.tokens = append(w.tokens, id)
			if id == m.tok.eot || i == limit-1 {
				break
			}
			if last, err = m.decode(st, []int{id}); err != nil {
				return nil, err
			}
		}
		w.avgLogprob = sum / float64(len(w.tokens))
		for _, tk := range w.tokens {
			if tk < m.tok.eot && tk < len(m.vocab) {
				w.text = append(w.text, m.vocab[tk]...)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// scaledLogprobs turns the logits of ids 0..eot into whisper.cpp's
// log-probabilities at temperature t (in float32, as
// whisper_compute_logprobs computes them), writing the probabilities the
// sampler draws from into probs. At the first step eot and the space token
// are suppressed (suppress_blank). It returns the log-probabilities in
// float64, -Inf for suppressed ids.
func scaledLogprobs(lg []float32, t float32, first bool, eot, space int, probs []float32) []float64 {
	ninf := float32(math.Inf(-1))
	x := make([]float32, len(lg))
	for i, v := range lg {
		x[i] = v / t
	}
	if first {
		x[eot] = ninf
		if space >= 0 {
			x[space] = ninf
		}
	}
	mx := ninf
	for _, v := range x {
		mx = max(mx, v)
	}
	var lse float32
	for _, v := range x {
		if v > ninf {
			lse += float32(math.Exp(float64(v - mx)))
		}
	}
	lse = float32(math.Log(float64(lse))) + mx
	out := make([]float64, len(x))
	for i, v := range x {
		if v > ninf {
			l := v - lse
			out[i] = float64(l)
			probs[i] = float32(math.Exp(float64(l)))
		} else {
			out[i] = math.Inf(-1)
			probs[i] = 0
		}
	}
	return out
}
