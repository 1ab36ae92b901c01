package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/testutil"
	"github.com/replyd/replyd/models"
	"github.com/replyd/replyd/store"
)

// modelsFolder makes a temporary models folder holding a tinyGGUF file of
// each name.
func modelsFolder(t testing.TB, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), tinyGGUF(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tinyGGUF is a minimal valid GGUF (architecture, vocabulary, chat
// template, one f32 tensor); name sets general.name so that two files
// differ.
func tinyGGUF(name string) []byte {
	var b bytes.Buffer
	u32 := func(v uint32) { binary.Write(&b, binary.LittleEndian, v) }
	u64 := func(v uint64) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { u64(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	u32(3)
	u64(1) // tensors
	u64(4) // keys
	str("general.architecture")
	u32(8)
	str("tiny")
	str("general.name")
	u32(8)
	str(name)
	str("tokenizer.chat_template")
	u32(8)
	str("{{ messages }}")
	str("tokenizer.ggml.tokens")
	u32(9)
	u32(8)
	u64(2)
	str("a")
	str("b")
	str("output.weight")
	u32(1)
	u64(4)
	u32(0) // f32
	u64(0)
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, 16))
	return b.Bytes()
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func uploadReq(name string, body []byte) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/v1/admin/models?name="+name, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(HeaderAdminKey, testAdminKey)
	return req
}

func TestAdminModels(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	e := newEnv(t, func(o *Options) {
		o.Models = models.NewService(models.ServiceOptions{Dir: dir, MaxBytes: 1 << 20, Node: o.Node, Store: o.Store, Now: o.Now})
	})
	free := int64(1 << 30)
	e.srv.models.FreeSpace = func(string) (int64, error) { return free, nil }
	good, other := tinyGGUF("tiny"), tinyGGUF("other")
	entry := func(active bool) string {
		return fmt.Sprintf(`{"file":"tiny.gguf","kind":"llm","bytes":%d,"sha256":"%s","manifest":"not in the manifest","check":"ok",`+
			`"info":{"kind":"llm","arch":"tiny","name":"tiny","version":3,"tensors":1,"vocab":2,"chat_template":true,`+
			`"weight_types":{"f32":1},"bytes":%d,"notes":["no tiny.block_count in the metadata"]},"active":%v}`, len(good), sha(good), len(good), active)
	}
	big := uploadReq("big.gguf", good)
	big.ContentLength = 2 << 20
	for _, c := range []struct {
		name   string
		req    *http.Request
		before func()
		status int
		body   string
	}{
		{"list empty", adminReq("GET", "/v1/admin/models", ""), nil, 200, `{"models":[],"free_bytes":1073741824,"max_bytes":1048576,"node":"box-test","boxes":[],"switch":false,"timings":{},"time":false,"compare":false}`},
		{"no credentials", httptest.NewRequest("GET", "/v1/admin/models", nil), nil, 401,
			errJSON(CodeUnauthorized, "an admin credential is required: send X-ADMIN-SESSION or X-ADMIN-KEY")},
		{"upload", uploadReq("tiny.gguf", good), nil, 201, entry(false)},
		{"upload again", uploadReq("tiny.gguf", good), nil, 201, entry(false)},
		{"other bytes, same name", uploadReq("tiny.gguf", other), nil, 409, errJSON(CodeConflict,
			"a different model file of that name is already in the folder: tiny.gguf; remove it first or choose another name")},
		{"bad name", uploadReq("..%2Fx.gguf", good), nil, 400, errJSON(CodeInvalidRequest,
			"?name= must be a model file name of letters, digits, '.', '_' and '-', ending in .gguf or .bin")},
		{"cut in the tensor", uploadReq("cut.gguf", good[:len(good)-4]), nil, 422, errJSON(CodeInvalidModel,
			fmt.Sprintf("the model file was refused: invalid model file: truncated: tensor 0 (16 bytes at offset %d) ends at byte %d, the file has %d",
				len(good)-16, len(good), len(good)-4))},
		{"zeros", uploadReq("zeros.bin", make([]byte, 4096)), nil, 422, errJSON(CodeInvalidModel,
			`the model file was refused: invalid model file: not a GGUF or whisper.cpp ggml file (magic "\x00\x00\x00\x00")`)},
		{"over the bound", big, nil, 413, errJSON(CodePayloadTooLarge, "the model file is 2097152 bytes; the limit is 1 MiB")},
		{"would not fit", uploadReq("b.gguf", good), func() { free = 1000 }, 507, errJSON(CodeInsufficientStorage,
			fmt.Sprintf("the file needs %d bytes (64.0 MiB) of free disk space and the models folder's disk has 1000 (1 KiB); free space on it or upload a smaller file", len(good)+64<<20))},
		{"list", adminReq("GET", "/v1/admin/models", ""), func() { free = 1 << 30 }, 200,
			`{"models":[` + entry(false) + `],"free_bytes":1073741824,"max_bytes":1048576,"node":"box-test","boxes":[],"switch":false,"timings":{},"time":false,"compare":false}`},
		{"list, active", adminReq("GET", "/v1/admin/models", ""), func() {
			e.health.mu.Lock()
			e.health.engines = []engine.EngineStatus{{Name: "llm", Ready: true, Model: filepath.Join(dir, "tiny.gguf")}}
			e.health.mu.Unlock()
		}, 200, `{"models":[` + entry(true) + `],"free_bytes":1073741824,"max_bytes":1048576,"node":"box-test","boxes":[],"switch":false,"timings":{},"time":false,"compare":false}`},
		{"remove active", adminReq("DELETE", "/v1/admin/models/tiny.gguf", ""), nil, 409, errJSON(CodeConflict,
			"the model is in use: tiny.gguf: switch to another model before removing it")},
		{"remove missing", adminReq("DELETE", "/v1/admin/models/nope.gguf", ""), nil, 404, errJSON(CodeNotFound, "no such model file: nope.gguf")},
		{"remove bad name", adminReq("DELETE", "/v1/admin/models/.x", ""), nil, 400, errJSON(CodeInvalidRequest,
			"the model file name must be letters, digits, '.', '_' and '-', ending in .gguf or .bin")},
		{"remove", adminReq("DELETE", "/v1/admin/models/tiny.gguf", ""), func() {
			e.health.mu.Lock()
			e.health.engines = nil
			e.health.mu.Unlock()
		}, 204, ""},
		{"list after", adminReq("GET", "/v1/admin/models", ""), nil, 200, `{"models":[],"free_bytes":1073741824,"max_bytes":1048576,"node":"box-test","boxes":[],"switch":false,"timings":{},"time":false,"compare":false}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			rec := e.do(c.req)
			if c.status == 204 {
				if rec.Code != 204 || rec.Body.Len() != 0 {
					t.Errorf("%d %s", rec.Code, rec.Body)
				}
				return
			}
			wantJSON(t, rec, c.status, c.body)
		})
	}
	// Nothing refused or cut is left in the folder, not even a temp file.
	des, _ := os.ReadDir(dir)
	if len(des) != 0 {
		t.Errorf("folder holds %v", des)
	}
	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName == store.StreamAdmin && strings.Contains(l.Message, "model") {
			msgs = append(msgs, l.Level+" "+l.Message)
		}
	}
	want := []string{
		"info model uploaded: tiny.gguf (llm, " + fmt.Sprint(len(good)) + " bytes, sha256 " + sha(good) + ", not in the manifest)",
		"info model uploaded: tiny.gguf (llm, " + fmt.Sprint(len(good)) + " bytes, sha256 " + sha(good) + ", not in the manifest)",
		"warn model upload refused: tiny.gguf: a different model file of that name is already in the folder: tiny.gguf; remove it first or choose another name",
		"warn model upload refused: cut.gguf: the model file was refused: invalid model file: truncated: tensor 0",
		"warn model upload refused: zeros.bin: the model file was refused: invalid model file: not a GGUF",
		"warn model upload refused: big.gguf is 2097152 bytes, the limit is 1048576",
		"warn model upload refused: b.gguf: the file needs",
		"info model removed: tiny.gguf",
	}
	if len(msgs) != len(want) {
		t.Fatalf("admin log:\n%s", strings.Join(msgs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(msgs[i], want[i]) {
			t.Errorf("admin log %d: %q, want %q…", i, msgs[i], want[i])
		}
	}
}

// TestAdminModelsDroppedUpload: a body that fails mid-way (a dropped
// connection) leaves no file behind, and the same upload sent again works.
func TestAdminModelsDroppedUpload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	e := newEnv(t, withModels(dir, nil, nil))
	e.srv.models.FreeSpace = func(string) (int64, error) { return 1 << 30, nil }
	good := tinyGGUF("tiny")
	req := uploadReq("tiny.gguf", nil)
	req.Body = &failingBody{data: good[:50]}
	req.ContentLength = int64(len(good))
	rec := e.do(req)
	wantJSON(t, rec, 400, errJSON(CodeInvalidRequest, "the upload ended before the announced Content-Length; send the file again"))
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("folder holds %v after a dropped upload", des)
	}
	if rec := e.do(uploadReq("tiny.gguf", good)); rec.Code != 201 {
		t.Errorf("re-sent upload: %d %s", rec.Code, rec.Body)
	}
}

func TestAdminModelsNotConfigured(t *testing.T) {
	e := newEnv(t)
	for _, req := range []*http.Request{adminReq("GET", "/v1/admin/models", ""), uploadReq("a.gguf", []byte("x")),
		adminReq("DELETE", "/v1/admin/models/a.gguf", "")} {
		wantJSON(t, e.do(req), 501, errJSON(CodeNotSupported, "this server has no models folder"))
	}
}

// failingBody yields data, then fails as a reset connection does.
type failingBody struct {
	data []byte
	off  int
}

func (f *failingBody) Read(p []byte) (int, error) {
	if f.off >= len(f.data) {
		return 0, fmt.Errorf("read tcp: connection reset by peer")
	}
	n := copy(p, f.data[f.off:])
	f.off += n
	return n, nil
}

func (f *failingBody) Close() error { return nil }

// TestAdminModelsDiskFills: an upload whose disk fills while it is copied
// is 507 insufficient_storage, chunked (no Content-Length: its size is
// unknown, and it says so) or with a Content-Length that fitted when it
// began; the admin log says so and nothing is left behind. A chunked
// upload cut off by the client is 400 without a false word about a
// Content-Length.
func TestAdminModelsDiskFills(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	e := newEnv(t, withModels(dir, nil, nil))
	free := int64(1 << 30)
	e.srv.models.FreeSpace = func(string) (int64, error) { return free, nil }
	e.srv.models.WrapWrite = func(w io.Writer) io.Writer { return testutil.FillingDisk(w, 40) }
	good := tinyGGUF("tiny")
	chunked := uploadReq("big.gguf", good)
	chunked.ContentLength = -1
	chunked.Body = io.NopCloser(bytes.NewReader(good))
	free = 2000
	wantJSON(t, e.do(chunked), 507, errJSON(CodeInsufficientStorage,
		"the models folder's disk filled after 40 bytes (1 KiB) of the file (its full size is unknown: it was sent without a Content-Length) were written; nothing was kept, and it has 2000 bytes (2 KiB) free; free space on it or upload a smaller file"))
	free = 1 << 30
	wantJSON(t, e.do(uploadReq("big.gguf", good)), 507, errJSON(CodeInsufficientStorage,
		fmt.Sprintf("the models folder's disk filled after 40 bytes (1 KiB) of its %d (1 KiB) were written; nothing was kept, and it has 1073741824 bytes (1.0 GiB) free; free space on it or upload a smaller file", len(good))))
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("folder holds %v after a full disk", des)
	}
	e.srv.models.WrapWrite = nil
	cut := uploadReq("big.gguf", nil)
	cut.ContentLength = -1
	cut.Body = &failingBody{data: good[:50]}
	wantJSON(t, e.do(cut), 400, errJSON(CodeInvalidRequest, "the upload was cut off before its end (it was sent without a Content-Length); send the file again"))
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("folder holds %v after a cut upload", des)
	}
	var msgs []string
	for _, l := range e.st.logsCopy() {
		if l.StreamName == store.StreamAdmin {
			msgs = append(msgs, l.Level+" "+l.Message)
		}
	}
	want := []string{
		"warn model upload refused: big.gguf: the models folder's disk filled after 40 bytes (1 KiB) of the file (its full size is unknown",
		"warn model upload refused: big.gguf: the models folder's disk filled after 40 bytes (1 KiB) of its",
		"warn model upload refused: big.gguf: the upload was cut off before its end",
	}
	if len(msgs) != len(want) {
		t.Fatalf("admin log:\n%s", strings.Join(msgs, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(msgs[i], want[i]) {
			t.Errorf("admin log %d: %q, want %q…", i, msgs[i], want[i])
		}
	}
}
