package fault

// A full disk is a clear answer (issue 10, point 4).

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fillDisk writes a file into dir until its file system is full and
// returns the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	_ = f.Close()
	// The last partial blocks.
	small := make([]byte, 512)
	g, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	for g != nil {
		if _, err := g.Write(small); err != nil {
			break
		}
	}
	if g != nil {
		_ = g.Close()
	}
	return path
}

// healthStorage returns /healthz's status field and its storage object.
func healthStorage(t *testing.T, p *testutil.Replyd) (string, map[string]any) {
	t.Helper()
	var h struct {
		Status  string         `json:"status"`
		Storage map[string]any `json:"storage"`
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Method: http.MethodGet, Path: "/healthz", Header: p.AdminHeader()}, 200), &h); err != nil {
		t.Fatal(err)
	}
	return h.Status, h.Storage
}

// TestFullDiskIs507: on a data disk that fills up while replyd runs, writes
// answer 507 insufficient_storage (never 500) with a message naming the
// cause; /healthz and the Status view say degraded while writes fail and
// recover once space is freed; a start on a nearly full disk warns, and
// /healthz says degraded while free space is under REPLYD_MIN_FREE_MB.
func TestFullDiskIs507(t *testing.T) {
	dir := t.TempDir()
	mountTmpfs(t, dir, "size=48m")
	data := filepath.Join(dir, "data")
	p := startProc(t, replydproc.Options{DataDir: data, Env: map[string]string{"REPLYD_MIN_FREE_MB": "1"}})
	p.WaitReady()
	if status, st := healthStorage(t, p); status != "ok" {
		t.Fatalf("healthz on an empty disk: %s %v", status, st)
	}
	filler := fillDisk(t, dir)

	// Create keys until the disk refuses a write: every answer is 200 or
	// 507, and the 507 says why.
	got507 := false
	for i := 0; i < 500 && !got507; i++ {
		status, body, err := doReq(p, t.Context(), replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/keys", Header: p.AdminHeader(),
			JSON: map[string]any{"client_id": fmt.Sprintf("tablet-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		switch status {
		case http.StatusOK:
		case http.StatusInsufficientStorage:
			got507 = true
			if !strings.Contains(string(body), `"error":"insufficient_storage"`) || !strings.Contains(string(body), "disk is full") {
				t.Errorf("507 body: %s", body)
			}
		default:
			t.Fatalf("key %d on a full disk: %d %s", i, status, body)
		}
	}
	if !got507 {
		t.Fatal("500 key creations on a full disk all succeeded")
	}
	status, st := healthStorage(t, p)
	if status != "degraded" || st["writable"] != false || !strings.Contains(fmt.Sprint(st["problem"]), "disk is full") {
		t.Errorf("healthz with failing writes: %s %v", status, st)
	}
	var view struct {
		Status  string         `json:"status"`
		Storage map[string]any `json:"storage"`
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/status", Header: p.AdminHeader()}, 200), &view); err != nil || view.Status != "degraded" {
		t.Errorf("status view: %+v %v", view, err)
	}
	// Inference still works (its log entry is lost, the answer is not).
	key := createKeyEventually(t, p, filler)
	if resp, err := p.InferText(t.Context(), key.APIKey, "Still answering?"); err != nil || resp.Status != 200 {
		t.Errorf("inference on a full disk: %d %v %s", resp.Status, err, resp.Body)
	}

	// Space freed: the next write succeeds and health recovers.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p.CreateKey("after-cleanup")
	if status, st := healthStorage(t, p); status != "ok" {
		t.Errorf("healthz after freeing space: %s %v", status, st)
	}
	p.Stop()

	// A start with less free space than REPLYD_MIN_FREE_MB (default 512)
	// warns, and /healthz says degraded.
	q := startProc(t, replydproc.Options{DataDir: data, AdminKey: p.AdminKey})
	q.WaitReady()
	if status, st := healthStorage(t, q); status != "degraded" || !strings.Contains(fmt.Sprint(st["problem"]), "free on the data disk") {
		t.Errorf("healthz on a small disk: %s %v", status, st)
	}
	if !strings.Contains(q.Output(), "disk is nearly full") {
		t.Errorf("no start-up warning:\n%s", replydproc.Tail(q.Output(), 20))
	}
}

// createKeyEventually frees a little space if needed to create one key, so
// that the inference check above has a key to use; it fills the disk again.
func createKeyEventually(t *testing.T, p *testutil.Replyd, filler string) testutil.CreatedKey {
	t.Helper()
	if err := os.Truncate(filler, 0); err != nil {
		t.Fatal(err)
	}
	k := p.CreateKey("on-a-full-disk")
	fillDisk(t, filepath.Dir(filler))
	time.Sleep(10 * time.Millisecond)
	return k
}
