package fault

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
)

// TestSystemdNotify plays systemd's side of Type=notify: replyd reports
// READY=1 only once the models are loaded (/healthz answers 200 at that
// moment), and STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := startProc(t, replydproc.Options{DataDir: t.TempDir(), Env: map[string]string{"NOTIFY_SOCKET": sock}})
	// The reader checks /healthz the moment READY=1 arrives: ready means
	// the models are loaded now, not later.
	readyHealth := make(chan int, 1)
	stopping := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			m := string(buf[:n])
			if strings.Contains(m, "READY=1") {
				resp, err := p.Do(context.Background(), replydproc.Request{Path: "/healthz"})
				if err != nil {
					resp.Status = -1
				}
				readyHealth <- resp.Status
			}
			if strings.Contains(m, "STOPPING=1") {
				close(stopping)
				return
			}
		}
	}()
	p.WaitReady()
	select {
	case st := <-readyHealth:
		if st != http.StatusOK {
			t.Fatalf("READY=1 was sent while /healthz answered %d", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("/healthz answers 200 but replyd sent no READY=1 within 10 s")
	}
	p.Stop()
	select {
	case <-stopping:
	case <-time.After(10 * time.Second):
		t.Fatal("no STOPPING=1 after SIGTERM")
	}
}
