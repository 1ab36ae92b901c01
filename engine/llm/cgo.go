package llm

/*
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

// Prototypes of llama.cpp functions that github.com/ollama/ollama/llama
// compiles into the binary but does not wrap. They match llama.h of the
// llama.cpp vendored by ollama v0.17.4 (llama_token is int32_t; the log
// callback's first argument is enum ggml_log_level, passed as an int).
// UPGRADING ollama: TestPrototypesMatchLlamaH (prototypes_test.go) compares
// these with llama.h of the module version in go.mod and names any function
// whose return or parameter types changed; fix the prototype and its Go
// caller before anything else, since C links by name and would not notice.
struct llama_vocab;
struct llama_chat_message { const char * role; const char * content; };
typedef void (*replyd_log_callback)(int level, const char * text, void * user_data);

int32_t llama_chat_apply_template(const char * tmpl, const struct llama_chat_message * chat,
                                  size_t n_msg, bool add_ass, char * buf, int32_t length);
void llama_log_set(replyd_log_callback cb, void * user_data);
bool llama_vocab_is_control(const struct llama_vocab * vocab, int32_t token);
bool llama_vocab_is_eog(const struct llama_vocab * vocab, int32_t token);
int32_t llama_token_to_piece(const struct llama_vocab * vocab, int32_t token, char * buf,
                             int32_t length, int32_t lstrip, bool special);

extern void replydLlamaLog(int level, char * text, void * user_data);
static void replyd_set_log(void) { llama_log_set((replyd_log_callback)replydLlamaLog, NULL); }
*/
import "C"

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

// cLog routes llama.cpp and ggml log lines into slog. llama.cpp writes a line
// in pieces (level CONT continues the previous one), so pieces are buffered
// until a newline.
var cLog struct {
	mu      sync.Mutex
	logger  atomic.Pointer[slog.Logger]
	pending strings.Builder
	level   slog.Level
	lastErr string
}

func init() {
	C.replyd_set_log()
}

// ggml_log_level values.
const (
	ggmlLogDebug = 1
	ggmlLogInfo  = 2
	ggmlLogWarn  = 3
	ggmlLogError = 4
	ggmlLogCont  = 5
)

//export replydLlamaLog
func replydLlamaLog(level C.int, text *C.char, _ unsafe.Pointer) {
	s := C.GoString(text)
	cLog.mu.Lock()
	defer cLog.mu.Unlock()
	if int(level) != ggmlLogCont {
		switch int(level) {
		case ggmlLogError:
			cLog.level = slog.LevelError
		case ggmlLogWarn:
			cLog.level = slog.LevelWarn
		default:
			// llama.cpp's info output (tensor listings, buffer sizes)
			// is debugging detail for replyd.
			cLog.level = slog.LevelDebug
		}
	}
	cLog.pending.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		return
	}
	line := strings.TrimSpace(cLog.pending.String())
	cLog.pending.Reset()
	if line == "" {
		return
	}
	if cLog.level > slog.LevelDebug && abortsRaised.Load() > 0 {
		// A cancelled request's decode was aborted (abort.go): llama.cpp
		// reports the stopped computation as failed.
		cLog.level = slog.LevelDebug
	}
	if cLog.level >= slog.LevelError && len(cLog.lastErr) < 1000 {
		if cLog.lastErr != "" {
			cLog.lastErr += "; "
		}
		cLog.lastErr += line
	}
	l := cLog.logger.Load()
	if l == nil {
		l = slog.Default()
	}
	l.Log(context.Background(), cLog.level, line, "component", "llama.cpp")
}

// takeLastCError returns the error lines llama.cpp logged since the last
// call, joined with "; ", and forgets them.
func takeLastCError() string {
	cLog.mu.Lock()
	defer cLog.mu.Unlock()
	s := cLog.lastErr
	cLog.lastErr = ""
	return s
}

// chatMessage is one message handed to a chat template.
type chatMessage struct {
	Role    string // "system", "user" or "assistant"
	Content string
	// tokens, when set, are the tokens the model sampled for Content (a
	// reply it offered): the prompt holds them in place of Content's.
	tokens []int
}

// errUnknownTemplate is returned for a template llama.cpp does not know.
var errUnknownTemplate = errors.New("chat template not supported by llama.cpp's built-in templates")

// applyTemplate renders msgs with llama.cpp's built-in template tmpl, which
// is either a template name ("chatml", "llama3", "gemma", ...) or the Jinja
// source from a model's metadata, which llama.cpp recognises by its markers.
// With addAssistant the rendered prompt ends with the opening of an
// assistant turn; without, it ends after the last message.
func applyTemplate(tmpl string, msgs []chatMessage, addAssistant bool) (string, error) {
	ctmpl := C.CString(tmpl)
	defer C.free(unsafe.Pointer(ctmpl))
	cmsgs := (*[1 << 20]C.struct_llama_chat_message)(C.malloc(C.size_t(len(msgs)+1) * C.size_t(unsafe.Sizeof(C.struct_llama_chat_message{}))))[: len(msgs)+1 : len(msgs)+1]
	defer C.free(unsafe.Pointer(&cmsgs[0]))
	total := 0
	for i, m := range msgs {
		cmsgs[i].role = C.CString(m.Role)
		cmsgs[i].content = C.CString(m.Content)
		total += len(m.Role) + len(m.Content)
	}
	defer func() {
		for i := range msgs {
			C.free(unsafe.Pointer(cmsgs[i].role))
			C.free(unsafe.Pointer(cmsgs[i].content))
		}
	}()
	size := 2*total + 256
	for range 2 {
		buf := C.malloc(C.size_t(size))
		n := int(C.llama_chat_apply_template(ctmpl, &cmsgs[0], C.size_t(len(msgs)), C.bool(addAssistant), (*C.char)(buf), C.int32_t(size)))
		if n < 0 {
			C.free(buf)
			return "", errUnknownTemplate
		}
		if n <= size {
			s := C.GoStringN((*C.char)(buf), C.int(n))
			C.free(buf)
			return s, nil
		}
		C.free(buf)
		size = n + 1
	}
	return "", errors.New("chat template output kept growing")
}

// vocab wraps the C vocabulary of a loaded model.
type vocabRef struct {
	p *C.struct_llama_vocab
}

func newVocabRef(m *llama.Model) vocabRef {
	return vocabRef{p: (*C.struct_llama_vocab)(unsafe.Pointer(m.Vocab()))}
}

// isStop reports whether token ends a reply: an end-of-generation token or
// any other control token (<s>, <|im_start|>, ...).
func (v vocabRef) isStop(token int) bool {
	return bool(C.llama_vocab_is_eog(v.p, C.int32_t(token))) || bool(C.llama_vocab_is_control(v.p, C.int32_t(token)))
}

// piece returns the bytes token decodes to, rendering control tokens as
// nothing. Byte tokens give single bytes, which may be part of a UTF-8
// sequence split across tokens.
func (v vocabRef) piece(token int) []byte {
	var buf [64]byte
	n := int(C.llama_token_to_piece(v.p, C.int32_t(token), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, C.bool(false)))
	if n >= 0 {
		return append([]byte(nil), buf[:n]...)
	}
	big := make([]byte, -n)
	n = int(C.llama_token_to_piece(v.p, C.int32_t(token), (*C.char)(unsafe.Pointer(&big[0])), C.int32_t(len(big)), 0, C.bool(false)))
	if n < 0 {
		return nil
	}
	return big[:n]
}
