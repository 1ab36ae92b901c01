package bolt

import (
	"sync"
	"time"
)

// gate admits transactions and lets ScrubFreePages have the file to itself
// for a few milliseconds. A plain sync.RWMutex would do that too, but its
// Lock holds every new transaction back behind the oldest open one: a
// backup streamed to a slow client would stall every request for as long
// as the download takes. The gate instead waits, holding nobody up, until
// no long reader (a backup) is open, then holds new transactions back only
// while the short ones still open finish; if they take longer than
// drainLimit it lets everyone through again and retries.
type gate struct {
	mu     sync.Mutex
	active int           // open transactions
	long   int           // open long readers, among active
	drain  chan struct{} // non-nil while draining: closed when it ends
	idle   chan struct{} // non-nil while draining with active > 0: closed at 0
	excl   sync.Mutex    // one exclusive holder at a time
}

// drainLimit bounds one attempt to wait for the open short transactions.
const drainLimit = 500 * time.Millisecond

// enter admits one transaction (long: a backup); leave ends it.
func (g *gate) enter(long bool) {
	for {
		g.mu.Lock()
		if g.drain == nil {
			g.active++
			if long {
				g.long++
			}
			g.mu.Unlock()
			return
		}
		ch := g.drain
		g.mu.Unlock()
		<-ch
	}
}

func (g *gate) leave(long bool) {
	g.mu.Lock()
	g.active--
	if long {
		g.long--
	}
	if g.active == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// exclusive returns once no transaction is open; new ones wait until
// release is called.
func (g *gate) exclusive() (release func()) {
	g.excl.Lock()
	for {
		g.mu.Lock()
		if g.long > 0 {
			g.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			continue
		}
		drain := make(chan struct{})
		g.drain = drain
		var idle chan struct{}
		if g.active > 0 {
			idle = make(chan struct{})
			g.idle = idle
		}
		g.mu.Unlock()
		ok := idle == nil
		if !ok {
			t := time.NewTimer(drainLimit)
			select {
			case <-idle:
				ok = true
			case <-t.C:
				g.mu.Lock()
				ok = g.active == 0
				if !ok {
					g.idle, g.drain = nil, nil
					close(drain)
				}
				g.mu.Unlock()
			}
			t.Stop()
		}
		if ok {
			return func() {
				g.mu.Lock()
				g.drain = nil
				close(drain)
				g.mu.Unlock()
				g.excl.Unlock()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
