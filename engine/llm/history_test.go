package llm

import (
	"strings"
	"testing"
	"time"
)

// historyEngine is a demo engine whose history budget is 2 s at an injected
// prompt speed of 150 tokens a second: 300 tokens, with 1024 tokens of
// context for a dialog.
func historyEngine(t *testing.T) *Engine {
	t.Helper()
	e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 2, ContextPerSeq: 1024, ColdPromptTarget: 2 * time.Second, PromptRate: 150})
	if got := e.historyBudget(); got != 300 {
		t.Fatalf("history budget %d tokens, want 300", got)
	}
	return e
}

// TestColdDialogFitsTarget: a cold dialog of the most messages the API
// allows (200) costs no more uncached prompt tokens than the target allows
// at the injected speed (so it is answered within the target at that
// speed, with no timing in the test); it keeps the most recent history and
// says how much. A request whose required part (system prompt, profile,
// the partner's turn) alone exceeds the budget is still answered, without
// history.
func TestColdDialogFitsTarget(t *testing.T) {
	e := historyEngine(t)
	req := request(2, 4)
	req.Messages = longDialog(200, 30)
	req.DialogID = "cold"
	g := mustGenerate(t, e, req)
	if uncached := g.PromptTokens - g.CachedTokens; uncached > e.historyBudget() {
		t.Errorf("cold dialog: %d uncached prompt tokens, budget %d", uncached, e.historyBudget())
	}
	if g.HistorySent != 199 || g.HistoryUsed <= 0 || g.HistoryUsed >= g.HistorySent {
		t.Errorf("history sent %d, used %d: want 199 sent and some but not all used", g.HistorySent, g.HistoryUsed)
	}
	if len(g.Candidates) == 0 {
		t.Fatal("no candidates")
	}

	big := request(2, 4)
	big.SystemPrompt = strings.Repeat("Reply in short plain words and never use a word the user would not say. ", 40)
	big.Messages = longDialog(20, 30)
	g = mustGenerate(t, e, big)
	if g.PromptTokens <= e.historyBudget() || g.HistoryUsed != 0 || g.HistorySent != 19 || len(g.Candidates) == 0 {
		t.Errorf("oversized required part: %d prompt tokens, history %d of %d, %d candidates; want more than %d tokens, answered without history",
			g.PromptTokens, g.HistoryUsed, g.HistorySent, len(g.Candidates), e.historyBudget())
	}
}

// TestHistoryCutInBlocks: a dialog that goes on for many turns past its
// context stays within the budget on every turn. While its prefix is
// cached its history grows (only the new turns are uncached); once the
// context is full the history is cut back to the budget at a block
// boundary, so most turns after a cut find their prefix cached again,
// where sliding the window by a turn each time would evaluate the whole
// prompt on every turn.
func TestHistoryCutInBlocks(t *testing.T) {
	e := historyEngine(t)
	dialog := longDialog(81, 30)
	budget := e.historyBudget()
	cold, warm := 0, 0
	var uncachedLog []int
	for n := 1; n <= len(dialog); n += 2 {
		req := request(2, 4)
		req.DialogID = "blocks"
		req.Messages = dialog[:n]
		g := mustGenerate(t, e, req)
		uncached := g.PromptTokens - g.CachedTokens
		uncachedLog = append(uncachedLog, uncached)
		if uncached > budget {
			t.Errorf("turn of %d messages: %d uncached tokens, budget %d", n, uncached, budget)
		}
		if n == 1 {
			continue
		}
		// Two new messages of 30 words cost under 100 tokens.
		if uncached <= 100 {
			warm++
		} else {
			cold++
		}
	}
	turns := warm + cold
	// 40 turns of about 70 new tokens, about 2800 tokens in all: a cut
	// whenever the history outgrows the context (about 1000 tokens) after
	// it was cut back to the budget (300), every 10 turns or so.
	if warm < turns/2 {
		t.Errorf("%d of %d turns warm, want most (uncached tokens by turn: %v)", warm, turns, uncachedLog)
	}
	if cold == 0 {
		t.Errorf("no turn cut the history: the dialog never outgrew the budget (uncached tokens by turn: %v)", uncachedLog)
	}
	t.Logf("%d warm and %d cold turns; uncached tokens by turn: %v", warm, cold, uncachedLog)
}

// TestPromptRateMeasured: without an injected speed, Open measures one and
// the budget follows from it; without a target there is no budget.
func TestPromptRateMeasured(t *testing.T) {
	e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 2, ColdPromptTarget: time.Second})
	if b := e.historyBudget(); e.promptRate <= 0 || e.promptSlope < 0 || b < 1 || b > max(int(e.promptRate), 1) {
		t.Errorf("prompt speed %v tokens/s, slope %v, budget %d tokens for 1 s", e.promptRate, e.promptSlope, b)
	}
	if e := openDemo(t, Options{MaxReplyTokens: 8, MaxCandidates: 2}); e.historyBudget() != 0 || e.promptRate != 0 {
		t.Errorf("without a target: speed %v, budget %d", e.promptRate, e.historyBudget())
	}
}

// TestBudgetTokensCountsAttention: with a cost growing along the context,
// the budget is the prompt whose summed cost is the target; without, the
// target times the speed.
func TestBudgetTokensCountsAttention(t *testing.T) {
	if n := budgetTokens(4, 200, 0); n != 800 {
		t.Errorf("no slope: %d tokens, want 800", n)
	}
	const rate, slope = 212.0, 2.8e-6
	n := budgetTokens(4, rate, slope)
	a := 1/rate - slope*promptRateTokens/2
	cost := func(n int) float64 { return float64(n) * (a + slope*float64(n)/2) }
	if cost(n) > 4 || cost(n+2) <= 4 || n >= 848 {
		t.Errorf("slope %v: %d tokens cost %.3f s (and %d: %.3f s) for a 4 s target", slope, n, cost(n), n+2, cost(n+2))
	}
	if n := budgetTokens(0.001, 100, 1e-3); n != 1 {
		t.Errorf("a tiny target gives %d tokens, want 1", n)
	}
}
