// Package storetest is the one scenario suite of the store.Store contract.
// Every implementation runs it from its own tests:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t testing.TB, now func() time.Time) store.Store { … })
//	}
//
// the way database/sql drivers share a compliance suite. A scenario states
// behaviour that callers rely on; checks about how one implementation lays
// out its bytes stay in that implementation's own tests. When the contract
// grows (a new Store method), add a scenario to the table in this file and
// its function beside the others of its area.
package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/store"
)

// T0 is the fixed start of every scenario's clock.
var T0 = time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)

// Opener opens a fresh, empty store whose clock (for defaults such as a zero
// CreatedAt) is now. It closes the store when t ends and fails t if it cannot
// open one.
type Opener func(t testing.TB, now func() time.Time) store.Store

// Env is what a scenario runs against: a fresh store and its clock.
type Env struct {
	S     store.Store
	Clock *Clock
	// Open opens one more fresh store of the same kind on the same clock.
	Open func() store.Store
}

// scenario is one row of the table.
type scenario struct {
	name string
	run  func(t *testing.T, e Env)
}

// scenarios is the contract, area by area.
var scenarios = []scenario{
	// API keys (keys.go).
	{"keys/create-get-list-revoke", keysLifecycle},
	{"keys/create-defaults", keysCreateDefaults},
	{"keys/create-invalid", keysCreateInvalid},
	{"keys/same-nanosecond-order", keysSameNanosecond},
	{"keys/pages-2500", keysPages},
	{"keys/round-trip-every-field", keysRoundTrip},
	{"keys/empty-list-not-nil", keysEmptyList},
	{"keys/touch-throttled", keysTouchThrottled},
	{"keys/touch-never-backwards", keysTouchNeverBackwards},
	{"keys/concurrent-mixed-use", keysConcurrentMixedUse},
	{"keys/concurrent-creates", keysConcurrentCreates},

	// Admin key, OTP, sessions (auth.go).
	{"admin-key/set-replace-clear", adminKeyHash},
	{"admin-key/set-if-absent-one-wins", adminKeyIfAbsent},
	{"otp/per-scope-single-use-never-burned-expiry", otpLifecycle},
	{"otp/delete-prune", otpDeletePrune},
	{"otp/resend-interval-shared", otpResend},
	{"otp/pause-shared-by-boxes", otpGuardShared},
	{"otp/pause-per-scope-and-several-sources", otpGuardScopes},
	{"otp/invalid", otpInvalid},
	{"otp/concurrent-right-code-once", otpConcurrentRight},
	{"totp/each-step-once", totpSteps},
	{"secrets/get-or-create-set-delete", secrets},
	{"sessions/create-valid-prune-delete", sessionsLifecycle},
	{"secrets/get-or-create-set-delete", secretsLifecycle},
	{"secrets/concurrent-create-one-value", secretsConcurrentCreate},

	// Tablet pairings (pairings.go).
	{"pairings/redeem-once", pairingsRedeemOnce},
	{"pairings/revoked-status-and-taken-hash", pairingsRevokedAndTakenHash},
	{"pairings/expire-and-prune", pairingsExpire},
	{"pairings/bound-and-invalid", pairingsBoundAndInvalid},
	{"pairings/concurrent-redeem-once", pairingsConcurrentRedeem},

	// Live listening (live.go).
	{"live/ticket-single-use-expiry", liveTicketLifecycle},
	{"live/ticket-invalid-and-prune", liveTicketInvalid},
	{"live/ticket-concurrent-take-once", liveTicketConcurrentTake},
	{"live/ticket-shared-by-boxes", liveTicketShared},
	{"live/off-per-key", liveOffPerKey},
	// Models chosen on the admin page (models.go).
	{"models/choice-per-box-and-engine", modelChoicesPerBox},
	{"models/records-per-box-and-file", modelRecordsPerBox},

	// System prompt (prompt.go).
	{"prompt/versions-history-next", promptVersions},
	{"prompt/empty-store", promptEmpty},
	{"prompt/concurrent-same-version", promptConcurrentSameVersion},

	// Logs, statistics, pruning (logs.go).
	{"logs/query-filters-order", logsQuery},
	{"logs/round-trip-every-field", logsRoundTrip},
	{"logs/concurrent-appends", logsConcurrentAppends},
	{"stats/window-and-series", statsWindowAndSeries},
	{"stats/empty-and-invalid", statsEmptyAndInvalid},
	{"prune/logs-in-batches", pruneLogsInBatches},
	{"prune/logs-to-size", pruneLogsToSize},

	// Outcomes and the users' memory (outcomes.go).
	{"outcomes/inference-and-outcome", outcomesInferenceAndOutcome},
	{"outcomes/export-in-order", outcomesExport},
	{"stats/outcomes-keys-versions", statsOutcomes},
	{"stats/ksr", statsKSR},
	{"memory/pairs-and-revision", memoryPairs},
	{"memory/delete-user", memoryDeleteUser},
	{"memory/prune", memoryPrune},
	{"memory/links-scope-to-keys", memoryLinks},

	// Steered answers (steered.go).
	{"steer/answers-found-by-id-not-counted", steeredAnswers},

	// Operations (ops.go).
	{"ops/ping-describe-size-backup", opsBasics},
	{"snapshot/import-round-trip", snapshotRoundTrip},
	{"snapshot/import-refuses-or-replaces", snapshotImportRefusesOrReplaces},

	// Rate limits (ratelimit.go).
	{"ratelimit/window-limit-and-retry", limiter(limiterWindow)},
	{"ratelimit/unlimited-and-independent-keys", limiter(limiterUnlimitedAndKeys)},
	{"ratelimit/clock-skew-and-clock-set-back", limiter(limiterClocks)},
	{"ratelimit/limit-lowered-mid-window", limiter(limiterLowered)},
	{"ratelimit/concurrent-exact", limiter(limiterConcurrent)},
	{"ratelimit/refund-shed-requests", limiter(limiterRefund)},
	{"ratelimit/token-bucket", limiter(limiterBucket)},
	{"ratelimit/token-bucket-concurrent-exact", limiter(limiterBucketConcurrent)},
}

// Run runs every scenario as a parallel subtest of t, each on a fresh store
// from open.
func Run(t *testing.T, open Opener) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			clk := NewClock(T0)
			sc.run(t, Env{S: open(t, clk.Now), Clock: clk, Open: func() store.Store { return open(t, clk.Now) }})
		})
	}
}

// Clock is an injectable clock that tests move by hand.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Must fails the test on err.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// MustCreateKey stores a key with the given hash created at at.
func MustCreateKey(tb testing.TB, s store.Store, hash string, at time.Time) store.APIKey {
	tb.Helper()
	k := store.APIKey{Hash: hash, ClientID: "client-" + hash, Status: store.StatusActive, Scopes: []string{"infer"}, RateLimitPerMinute: 60, CreatedAt: at}
	Must(tb, s.CreateKey(k))
	return k
}

// MustAppend appends a log entry.
func MustAppend(tb testing.TB, s store.Store, e store.LogEntry) {
	tb.Helper()
	Must(tb, s.AppendLog(e))
}

// wantErr fails t unless err wraps want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// concurrently runs fn(0) … fn(n-1) at once and returns their errors.
func concurrently(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errs
}

// oneSucceeded reports how many of errs are nil, failing the test for any
// other error than loser (what the losers of a race for one thing get),
// described as what ("concurrent take").
func oneSucceeded(t *testing.T, errs []error, loser error, what string) int {
	t.Helper()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, loser):
			t.Errorf("%s: %v, want nil or %v", what, err, loser)
		}
	}
	return ok
}

// admitted runs allow n times at once and reports how many it admitted,
// failing the test on any error.
func admitted(t *testing.T, n int, allow func() (bool, error)) int {
	t.Helper()
	oks := make([]bool, n)
	errs := concurrently(n, func(i int) error {
		var err error
		oks[i], err = allow()
		return err
	})
	count := 0
	for i, err := range errs {
		Must(t, err)
		if oks[i] {
			count++
		}
	}
	return count
}
