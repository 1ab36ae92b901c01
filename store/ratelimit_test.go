package store_test

import (
	"testing"

	"github.com/replyd/replyd/store"
	"github.com/replyd/replyd/store/storetest"
)

// TestMemoryLimiterContract runs the store.RateLimiter scenarios on the
// single box's limiter (store/postgres runs them on the shared one).
func TestMemoryLimiterContract(t *testing.T) {
	storetest.RunLimiter(t, func(testing.TB) store.RateLimiter { return store.NewMemoryLimiter() })
}
