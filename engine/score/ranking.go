package score

// Ranking is how one turn's ranked candidates fared against the reply the
// user gave, or (summed with Add) a run of turns': the turns whose reply was
// the first candidate (Top1) or any (TopN) after Normalize, the best token
// F1, and the keystrokes the best candidate would have saved (Saved) of
// the reply's characters (Typed). `replyd eval` and the models package's
// comparison both score with it.
type Ranking struct {
	Top1, TopN   int
	BestF1       float64
	Saved, Typed int
}

// Rank scores the candidates (best first) against the reply: exact match
// after Normalize at rank 1 and at any rank, the best token F1, and the
// keystrokes the best candidate would have saved had the user taken it and
// edited it into the reply (issue 12's rule, Edited).
func Rank(cands []string, reply string) Ranking {
	r := Ranking{Typed: Chars(reply)}
	want := Normalize(reply)
	for i, c := range cands {
		if Normalize(c) == want {
			if i == 0 {
				r.Top1 = 1
			}
			r.TopN = 1
		}
		r.BestF1 = max(r.BestF1, TokenF1(c, reply))
		r.Saved = max(r.Saved, Edited(c, reply))
	}
	return r
}

// Add sums o into r.
func (r *Ranking) Add(o Ranking) {
	r.Top1 += o.Top1
	r.TopN += o.TopN
	r.BestF1 += o.BestF1
	r.Saved += o.Saved
	r.Typed += o.Typed
}

// Rates are r's shares over turns turns: top-1 and top-n exact, the mean
// best token F1, and the keystrokes saved over those typed (0 for none).
func (r Ranking) Rates(turns int) (top1, topN, meanF1, saving float64) {
	if turns > 0 {
		top1 = float64(r.Top1) / float64(turns)
		topN = float64(r.TopN) / float64(turns)
		meanF1 = r.BestF1 / float64(turns)
	}
	if r.Typed > 0 {
		saving = float64(r.Saved) / float64(r.Typed)
	}
	return top1, topN, meanF1, saving
}
