package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replyd/replyd/api"
	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/engine/llm"
	"github.com/replyd/replyd/engine/whisper"
	"github.com/replyd/replyd/internal/cpubudget"
	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/notify"
)

// Default model paths: the demo models `replyd models demo` writes.
const (
	DefaultLLMModel     = "models/demo/llm-demo.gguf"
	DefaultWhisperModel = "models/demo/whisper-demo.bin"
	// DefaultVADModel is where scripts/deps.sh and `make run` put Silero
	// VAD's weights.
	DefaultVADModel = "models/silero_vad_v5.onnx"
)

// DefaultColdPromptTarget is the default REPLYD_COLD_PROMPT_TARGET. A turn
// the user waits for is its prompt, then its replies (1 to 3 s on a 2-core
// box at both Qwen2.5 shapes); 4 s of uncached prompt at the measured
// prompt speed (docs/history-budget.md, "Measurements") keeps a cold turn's total well
// inside 10 s and a dialog sent cold from timing out, while a dialog's
// usual warm turn (a few dozen new tokens) never comes near it.
const DefaultColdPromptTarget = 4 * time.Second

// Config is replyd's whole configuration. Values come from flags, which
// override REPLYD_* environment variables, which override the defaults.
type Config struct {
	Addr        string
	DataDir     string
	AdminKey    string
	MetricsAddr string
	StoreURL    string // "": the bbolt file in DataDir; postgres://…: a shared PostgreSQL
	NodeName    string
	// TrustedProxies is REPLYD_TRUSTED_PROXIES as given; Validate parses it
	// into TrustedNets.
	TrustedProxies string
	TrustedNets    []*net.IPNet

	LLMModel     string
	WhisperModel string
	VADModel     string // Silero VAD v5 ONNX file; empty or missing: VAD off
	GPULayers    int
	CPUCores     int
	Threads      int
	STTThreads   int
	Overlap      string // on, off
	// WhisperBackend: where speech computes, auto, cpu, gpu or ggml-cpu
	// (whisperCompute).
	WhisperBackend string
	// WhisperFallback: on (whisper.cpp's temperature fallback), off (-nf).
	WhisperFallback string
	Decoding        string // auto, batched, sequential
	ContextPerSeq   int
	QueueSize       int
	STTQueueSize    int
	MaxWaitRatio    float64
	MaxDecodes      int
	MaxReplyTokens  int
	PrefixCacheMiB  int
	Seed            int
	// ColdPromptTarget bounds the uncached prompt of one request in time
	// (llm.Options.ColdPromptTarget); 0: only the context bounds it.
	ColdPromptTarget time.Duration
	// WhisperMaxTokens is whisper.cpp's max_tokens: the most text tokens
	// one transcription window decodes (0: the model's own cap).
	WhisperMaxTokens int
	// WhisperWindow sizes the encoder's window (whisper.ParseWindow);
	// WhisperShortWindow is the window declaration (on/off: weights made
	// for a short window) of a Whisper file without one of its own
	// (models/window.go: the admin declares a file's in the Models view).
	WhisperWindow      string
	WhisperShortWindow string

	OTPChannel       string
	OTPWebhookURL    string
	TelegramBotToken string
	TelegramChatID   string
	TelegramAPIURL   string
	NtfyURL          string
	NtfyToken        string
	GotifyURL        string
	GotifyToken      string

	TLS     string // off, auto, on
	TLSCert string
	TLSKey  string

	OTPTTL            time.Duration
	OTPResendInterval time.Duration
	PublicURL         string
	CORSOrigins       string

	MaxBodyMiB   int
	MaxAudio     time.Duration
	InferTimeout time.Duration
	// Live listening (issue 23): on or off for the box, and the silence
	// that ends a partner's turn.
	Live           string
	LiveEndSilence time.Duration
	SessionTTL     time.Duration
	LogRetention   time.Duration
	LogMaxMB       int
	MinFreeMB      int
	// MemoryRetention is how long remembered pairs are kept; negative
	// (unset) follows LogRetention. See MemoryKeep.
	MemoryRetention time.Duration
	LogLevel        string
	LogFormat       string
	ShutdownGrace   time.Duration
}

// option describes one configuration value: its flag, its environment
// variable, its default and whether it is a secret (masked by `replyd config`).
// Defaults that the engines or the API define are taken from there (llm.Default*,
// api.DefaultLimits), never restated here. docs/configuration.md's table
// lists every option with its flag and documented default (TestOptionTable).
type option struct {
	flag string
	env  string
	def  string
	// doc is the default as documented when def depends on the machine
	// (e.g. "cores-1"); empty means def.
	doc    string
	usage  string
	secret bool
	// redact, when set, is how `replyd config` shows the value (instead of
	// masking all of it).
	redact func(v string) string
	set    func(c *Config, v string) error
	get    func(c *Config) string
}

func strOpt(flagName, env, def, usage string, secret bool, p func(c *Config) *string) option {
	return option{flag: flagName, env: env, def: def, usage: usage, secret: secret,
		set: func(c *Config, v string) error { *p(c) = v; return nil },
		get: func(c *Config) string { return *p(c) }}
}

func intOpt(flagName, env, def, usage string, p func(c *Config) *int) option {
	return option{flag: flagName, env: env, def: def, usage: usage,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("not an integer: %q", v)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*p(c)) }}
}

func floatOpt(flagName, env, def, usage string, p func(c *Config) *float64) option {
	return option{flag: flagName, env: env, def: def, usage: usage,
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				return fmt.Errorf("not a number of at least 0: %q", v)
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'g', -1, 64) }}
}

func durOpt(flagName, env, def, usage string, p func(c *Config) *time.Duration) option {
	return option{flag: flagName, env: env, def: def, usage: usage,
		set: func(c *Config, v string) error {
			d, err := ParseDuration(v)
			if err != nil {
				return err
			}
			*p(c) = d
			return nil
		},
		get: func(c *Config) string { return FormatDuration(*p(c)) }}
}

// defaultThreads is the number of cores the process may use (its affinity
// mask and cgroup quota, internal/cpubudget): both engines take their
// threads from one CPU budget (REPLYD_CPU_CORES), so neither needs to leave
// cores for the other.
func defaultThreads() int { return cpubudget.Cores() }

// documented returns the default as docs/configuration.md and --help state it.
func (o option) documented() string {
	if o.doc != "" {
		return o.doc
	}
	return o.def
}

// withDoc sets the documented default of o.
func withDoc(o option, doc string) option { o.doc = doc; return o }

func options() []option {
	lim := api.DefaultLimits()
	return []option{
		strOpt("addr", "REPLYD_ADDR", ":8080", "listen address", false, func(c *Config) *string { return &c.Addr }),
		strOpt("data-dir", "REPLYD_DATA_DIR", "./data", "directory holding replyd.db (and the self-signed TLS certificate)", false, func(c *Config) *string { return &c.DataDir }),
		strOpt("admin-key", "REPLYD_ADMIN_KEY", "", "the X-ADMIN-KEY value; generated and printed once on first start when empty", true, func(c *Config) *string { return &c.AdminKey }),
		redacted(strOpt("store-url", "REPLYD_STORE_URL", "", "empty: the bbolt file replyd.db in the data dir; postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=…: a PostgreSQL database several replyd boxes share", true, func(c *Config) *string { return &c.StoreURL }), redactURL),
		withDoc(strOpt("node-name", "REPLYD_NODE_NAME", defaultNodeName(), "this box's name in log entries, /healthz and the admin page", false, func(c *Config) *string { return &c.NodeName }), "the hostname"),
		strOpt("trusted-proxies", "REPLYD_TRUSTED_PROXIES", "", "addresses or CIDR ranges of reverse proxies whose X-Forwarded-For names the client (comma-separated); from anyone else the header is ignored", false, func(c *Config) *string { return &c.TrustedProxies }),
		strOpt("metrics-addr", "REPLYD_METRICS_ADDR", "", "serve /metrics without auth on this separate address (e.g. 127.0.0.1:9090); empty: /metrics on the main address behind admin auth", false, func(c *Config) *string { return &c.MetricsAddr }),

		strOpt("llm-model", "REPLYD_LLM_MODEL", DefaultLLMModel, "GGUF language model file", false, func(c *Config) *string { return &c.LLMModel }),
		strOpt("whisper-model", "REPLYD_WHISPER_MODEL", DefaultWhisperModel, "ggml Whisper model file", false, func(c *Config) *string { return &c.WhisperModel }),
		strOpt("whisper-fallback", "REPLYD_WHISPER_FALLBACK", "on", "on: whisper.cpp's temperature fallback (a window whose greedy text looks failed is decoded again at temperatures 0.2 to 1.0), and with it the shortened window's safety net (a shortened window that fails is decoded again at 30 s first); off: greedy only, as whisper.cpp's -nf, both off", false, func(c *Config) *string { return &c.WhisperFallback }),
		intOpt("whisper-max-tokens", "REPLYD_WHISPER_MAX_TOKENS", "0", "most text tokens Whisper decodes for one 30 s window, as whisper.cpp's max_tokens (0: no cap but the model's own); benchmarks set it to a real transcript's length, as random-weight models decode to their caps", func(c *Config) *int { return &c.WhisperMaxTokens }),
		strOpt("whisper-window", "REPLYD_WHISPER_WINDOW", "auto", "Whisper's encoder window for audio of one 30 s window (whisper.cpp's audio_ctx): auto (speech + 64 positions for weights made for a short window, else max(10 s, speech + 2 s)), speech (speech + 64 positions whatever the weights), full (30 s), or a floor in seconds", false, func(c *Config) *string { return &c.WhisperWindow }),
		strOpt("whisper-short-window", "REPLYD_WHISPER_SHORT_WINDOW", "off", "on: a Whisper file the admin declared nothing of in the Models view is taken as made for a short window (FUTO's acft fine-tunes), so auto uses the speech's own window", false, func(c *Config) *string { return &c.WhisperShortWindow }),
		strOpt("vad-model", "REPLYD_VAD_MODEL", DefaultVADModel, "Silero VAD v5 ONNX file (voice activity detection); empty or missing: VAD off", false, func(c *Config) *string { return &c.VADModel }),
		strOpt("whisper-backend", "REPLYD_WHISPER_BACKEND", "auto", "where speech-to-text computes: auto (on a GPU whenever the language model is: a GPU backend is loaded and gpu-layers is not 0; else cpu), cpu (replyd's own kernels and OpenBLAS, the faster on a CPU), gpu (ggml's GPU backend; start-up fails without one), ggml-cpu (the GPU's graphs on ggml's CPU backend, for comparison)", false, func(c *Config) *string { return &c.WhisperBackend }),
		intOpt("gpu-layers", "REPLYD_GPU_LAYERS", "-1", "layers to offload to a GPU backend (-1 = all when one is present)", func(c *Config) *int { return &c.GPULayers }),
		withDoc(intOpt("cpu-cores", "REPLYD_CPU_CORES", strconv.Itoa(cpubudget.Cores()), "cores the two engines share: their busy threads together never exceed it", func(c *Config) *int { return &c.CPUCores }), "cores"),
		withDoc(intOpt("threads", "REPLYD_THREADS", strconv.Itoa(defaultThreads()), "most CPU threads of one language-model decode, taken from the shared cores", func(c *Config) *int { return &c.Threads }), "cores"),
		withDoc(intOpt("stt-threads", "REPLYD_STT_THREADS", "0", "CPU threads of speech-to-text, taken from the shared cores for a whole transcription (0: the cores less one with the overlap on, so that the prompt is evaluated beside it, and the encoder takes the rest once nobody wants them; all of them without)", func(c *Config) *int { return &c.STTThreads }), "0"),
		strOpt("overlap", "REPLYD_OVERLAP", "on", "on: evaluate the prompt up to the partner's current turn while the recording is transcribed, on the cores speech-to-text leaves free; off", false, func(c *Config) *string { return &c.Overlap }),
		strOpt("decoding", "REPLYD_DECODING", "auto", "auto (time batched against sequential candidate decoding at start-up and take the faster), batched, sequential", false, func(c *Config) *string { return &c.Decoding }),
		intOpt("context", "REPLYD_LLM_CONTEXT", strconv.Itoa(llm.DefaultContextPerSeq), "language-model context tokens of one dialog, prompt and reply", func(c *Config) *int { return &c.ContextPerSeq }),
		intOpt("queue-size", "REPLYD_QUEUE_SIZE", "16", "inference requests that may wait for the language model; more get 503 overloaded", func(c *Config) *int { return &c.QueueSize }),
		intOpt("stt-queue-size", "REPLYD_STT_QUEUE_SIZE", "4", "recordings that may wait for speech-to-text; more get 503 overloaded", func(c *Config) *int { return &c.STTQueueSize }),
		intOpt("max-decodes", "REPLYD_MAX_DECODES", "2", "recordings decoded at once (each may take up to about 100 MB while it is decoded)", func(c *Config) *int { return &c.MaxDecodes }),
		floatOpt("max-wait-ratio", "REPLYD_MAX_WAIT_RATIO", "1", "a request whose expected wait for the CPU is more than this many times its own expected work gets 503 overloaded at once (0: only the queue sizes bound the wait)", func(c *Config) *float64 { return &c.MaxWaitRatio }),
		intOpt("max-reply-tokens", "REPLYD_MAX_REPLY_TOKENS", strconv.Itoa(llm.DefaultMaxReplyTokens), "token cap of one candidate reply (a few words; a reply also ends at its first newline)", func(c *Config) *int { return &c.MaxReplyTokens }),
		intOpt("prefix-cache-mib", "REPLYD_PREFIX_CACHE_MIB", strconv.Itoa(llm.DefaultPrefixCacheMiB), "memory bound of the dialog prefix cache", func(c *Config) *int { return &c.PrefixCacheMiB }),
		intOpt("seed", "REPLYD_SEED", "0", "base sampling seed (0 = random)", func(c *Config) *int { return &c.Seed }),
		durOpt("cold-prompt-target", "REPLYD_COLD_PROMPT_TARGET", FormatDuration(DefaultColdPromptTarget), "time a request's uncached prompt may take at the prompt speed measured at start-up: older history is cut, in blocks, to fit it (0: only the context bounds the history)", func(c *Config) *time.Duration { return &c.ColdPromptTarget }),

		strOpt("otp-channel", notify.EnvChannel, "console", "how admin login codes are delivered: console (a terminal, else a 0600 file in the data dir), webhook, telegram, ntfy, gotify; or totp (an authenticator app, nothing is sent)", false, func(c *Config) *string { return &c.OTPChannel }),
		durOpt("otp-ttl", "REPLYD_OTP_TTL", FormatDuration(lim.OTPTTL), "lifetime of a sent login code", func(c *Config) *time.Duration { return &c.OTPTTL }),
		durOpt("otp-resend-interval", "REPLYD_OTP_RESEND_INTERVAL", FormatDuration(lim.OTPResendInterval), "least time between two login codes asked for from one address", func(c *Config) *time.Duration { return &c.OTPResendInterval }),
		strOpt("otp-webhook-url", notify.EnvWebhookURL, "", "webhook channel: POST application/json {code,text,expires_at} here", true, func(c *Config) *string { return &c.OTPWebhookURL }),
		strOpt("telegram-bot-token", notify.EnvTelegramToken, "", "telegram channel: bot token", true, func(c *Config) *string { return &c.TelegramBotToken }),
		strOpt("telegram-chat-id", notify.EnvTelegramChatID, "", "telegram channel: chat id of the administrator", false, func(c *Config) *string { return &c.TelegramChatID }),
		strOpt("telegram-api-url", notify.EnvTelegramAPIURL, notify.DefaultTelegramAPIURL, "telegram channel: Bot API base URL (a LAN relay)", false, func(c *Config) *string { return &c.TelegramAPIURL }),
		strOpt("ntfy-url", notify.EnvNtfyURL, "", "ntfy channel: topic URL on the LAN", true, func(c *Config) *string { return &c.NtfyURL }),
		strOpt("ntfy-token", notify.EnvNtfyToken, "", "ntfy channel: access token (optional)", true, func(c *Config) *string { return &c.NtfyToken }),
		strOpt("gotify-url", notify.EnvGotifyURL, "", "gotify channel: server URL on the LAN", false, func(c *Config) *string { return &c.GotifyURL }),
		strOpt("gotify-token", notify.EnvGotifyToken, "", "gotify channel: application token", true, func(c *Config) *string { return &c.GotifyToken }),

		strOpt("tls", "REPLYD_TLS", "off", "off; auto (replyd's own certificate authority in the data dir signs the server certificate; tablets install GET /tls/ca.pem); on (needs --tls-cert and --tls-key)", false, func(c *Config) *string { return &c.TLS }),
		strOpt("tls-cert", "REPLYD_TLS_CERT", "", "TLS certificate file (PEM); setting it and --tls-key turns TLS on", false, func(c *Config) *string { return &c.TLSCert }),
		strOpt("tls-key", "REPLYD_TLS_KEY", "", "TLS private key file (PEM)", false, func(c *Config) *string { return &c.TLSKey }),

		strOpt("public-url", "REPLYD_PUBLIC_URL", "", "the base URL tablets reach replyd at (e.g. https://replyd.local:8080): pairing links and QR codes use it, and REPLYD_TLS=auto adds its host to the certificate; empty: the address the admin page was opened with", false, func(c *Config) *string { return &c.PublicURL }),
		strOpt("cors-origins", "REPLYD_CORS_ORIGINS", "", "comma-separated exact origins (https://host[:port]) whose web pages may call /v1/infer, /v1/pair and /v1/feedback; empty: none; * is refused", false, func(c *Config) *string { return &c.CORSOrigins }),

		intOpt("max-body-mib", "REPLYD_MAX_BODY_MIB", strconv.FormatInt(lim.MaxBodyBytes>>20, 10), "largest accepted request body in MiB", func(c *Config) *int { return &c.MaxBodyMiB }),
		durOpt("max-audio", "REPLYD_MAX_AUDIO", FormatDuration(lim.MaxAudio), "longest accepted recording", func(c *Config) *time.Duration { return &c.MaxAudio }),
		durOpt("infer-timeout", "REPLYD_INFER_TIMEOUT", FormatDuration(lim.InferTimeout), "deadline of one inference, queue wait included", func(c *Config) *time.Duration { return &c.InferTimeout }),
		strOpt("live", "REPLYD_LIVE", "on", "on: tablets may open live sessions (GET /v1/live) that listen to the partner as they speak; off: refused for every key", false, func(c *Config) *string { return &c.Live }),
		durOpt("live-end-silence", "REPLYD_LIVE_END_SILENCE", FormatDuration(engine.DefaultEndSilence), "silence after the partner's speech that ends their turn in a live session (docs/live.md)", func(c *Config) *time.Duration { return &c.LiveEndSilence }),
		durOpt("session-ttl", "REPLYD_SESSION_TTL", FormatDuration(lim.SessionTTL), "lifetime of an admin session", func(c *Config) *time.Duration { return &c.SessionTTL }),
		durOpt("log-retention", "REPLYD_LOG_RETENTION", "30d", "how long log entries are kept (0 = forever)", func(c *Config) *time.Duration { return &c.LogRetention }),
		intOpt("log-max-mb", "REPLYD_LOG_MAX_MB", "256", "most space the log may take in the data file, in MB; the oldest entries go first (0 = no bound)", func(c *Config) *int { return &c.LogMaxMB }),
		intOpt("min-free-mb", "REPLYD_MIN_FREE_MB", "512", "free space on the data disk under which start-up warns and /healthz says degraded, in MB", func(c *Config) *int { return &c.MinFreeMB }),
		{flag: "memory-retention", env: "REPLYD_MEMORY_RETENTION", def: "", doc: "(as log retention)", usage: "how long the remembered replies of users with remember: true are kept (0 = forever; empty: as --log-retention)",
			set: func(c *Config, v string) error {
				if strings.TrimSpace(v) == "" {
					c.MemoryRetention = -1
					return nil
				}
				d, err := ParseDuration(v)
				c.MemoryRetention = d
				return err
			},
			get: func(c *Config) string {
				if c.MemoryRetention < 0 {
					return ""
				}
				return FormatDuration(c.MemoryRetention)
			}},
		strOpt("log-level", "REPLYD_LOG_LEVEL", "info", "debug, info, warn, error", false, func(c *Config) *string { return &c.LogLevel }),
		strOpt("log-format", "REPLYD_LOG_FORMAT", "text", "text or json", false, func(c *Config) *string { return &c.LogFormat }),
		durOpt("shutdown-grace", "REPLYD_SHUTDOWN_GRACE", "30s", "how long in-flight requests may finish after SIGTERM", func(c *Config) *time.Duration { return &c.ShutdownGrace }),
	}
}

// LoadConfig builds a Config from the defaults, then env (getenv), then the
// flags in args. It returns the remaining positional arguments.
func LoadConfig(name string, args []string, getenv func(string) string, stderr io.Writer) (*Config, []string, error) {
	c := &Config{}
	opts := options()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, o := range opts {
		v := o.def
		if e := getenv(o.env); e != "" {
			v = e
		}
		if err := o.set(c, v); err != nil {
			return nil, nil, fmt.Errorf("%s=%q: %w", o.env, v, err)
		}
		o := o
		def := fmt.Sprintf("%q", o.documented())
		if o.doc != "" && o.def != "" {
			def += fmt.Sprintf(", here %s", o.def)
		}
		fs.Func(o.flag, fmt.Sprintf("%s (env %s, default %s)", o.usage, o.env, def), func(s string) error { return o.set(c, s) })
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: replyd %s [options]\n\nEvery option can also be set by its REPLYD_* environment variable; a flag wins over the environment.\n\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	return c, fs.Args(), nil
}

// Validate checks values that no single option can check alone.
func (c *Config) Validate() error {
	var errs []error
	if c.AdminKey != "" {
		if err := secret.CheckAdminKeyStrength(c.AdminKey); err != nil {
			errs = append(errs, fmt.Errorf("REPLYD_ADMIN_KEY: %w", err))
		}
	}
	if nets, err := api.ParseTrustedProxies(c.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("REPLYD_TRUSTED_PROXIES: %w", err))
	} else {
		c.TrustedNets = nets
	}
	switch c.OTPChannel {
	case "console", "webhook", "telegram", "ntfy", "gotify", api.ChannelTOTP:
	default:
		errs = append(errs, fmt.Errorf("REPLYD_OTP_CHANNEL: unknown channel %q (console, webhook, telegram, ntfy, gotify, totp)", c.OTPChannel))
	}
	if c.OTPTTL < time.Second || c.OTPResendInterval <= 0 {
		errs = append(errs, errors.New("REPLYD_OTP_TTL (at least 1s) and REPLYD_OTP_RESEND_INTERVAL must be positive"))
	}
	if c.LogMaxMB < 0 || c.MinFreeMB < 0 {
		errs = append(errs, errors.New("REPLYD_LOG_MAX_MB and REPLYD_MIN_FREE_MB must not be negative"))
	}
	switch c.TLS {
	case "off", "auto", "on":
	default:
		errs = append(errs, fmt.Errorf("REPLYD_TLS: %q is not off, auto or on", c.TLS))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("REPLYD_TLS_CERT and REPLYD_TLS_KEY must be set together"))
	}
	if c.TLS == "on" && c.TLSCert == "" {
		errs = append(errs, errors.New("REPLYD_TLS=on needs REPLYD_TLS_CERT and REPLYD_TLS_KEY (or use REPLYD_TLS=auto for a self-signed certificate)"))
	}
	if _, err := api.ParseCORSOrigins(c.CORSOrigins); err != nil {
		errs = append(errs, fmt.Errorf("REPLYD_CORS_ORIGINS: %w", err))
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("REPLYD_PUBLIC_URL: %q is not a base URL such as https://replyd.local:8080", c.PublicURL))
		}
	}
	if c.Threads < 1 || c.CPUCores < 1 {
		errs = append(errs, errors.New("REPLYD_THREADS and REPLYD_CPU_CORES must be at least 1"))
	}
	if c.STTThreads < 0 {
		errs = append(errs, errors.New("REPLYD_STT_THREADS must be 0 (automatic) or more"))
	}
	switch c.Live {
	case "on", "off":
	default:
		errs = append(errs, fmt.Errorf("REPLYD_LIVE: %q is not on or off", c.Live))
	}
	if c.LiveEndSilence < 100*time.Millisecond || c.LiveEndSilence > 5*time.Second {
		errs = append(errs, fmt.Errorf("REPLYD_LIVE_END_SILENCE: %s is outside 100ms-5s", c.LiveEndSilence))
	}
	switch c.Overlap {
	case "on", "off":
	default:
		errs = append(errs, fmt.Errorf("REPLYD_OVERLAP: %q is not on or off", c.Overlap))
	}
	switch c.WhisperFallback {
	case "on", "off":
	default:
		errs = append(errs, fmt.Errorf("REPLYD_WHISPER_FALLBACK: %q is not on or off", c.WhisperFallback))
	}
	if _, err := llm.ParseDecoding(c.Decoding); err != nil {
		errs = append(errs, fmt.Errorf("REPLYD_DECODING: %w", err))
	}
	if c.QueueSize < 1 || c.STTQueueSize < 1 || c.MaxDecodes < 1 {
		errs = append(errs, errors.New("REPLYD_QUEUE_SIZE, REPLYD_STT_QUEUE_SIZE and REPLYD_MAX_DECODES must be at least 1"))
	}
	if c.ContextPerSeq < 256 {
		errs = append(errs, errors.New("REPLYD_LLM_CONTEXT must be at least 256 tokens"))
	}
	if c.WhisperMaxTokens < 0 {
		errs = append(errs, errors.New("REPLYD_WHISPER_MAX_TOKENS must be 0 (no cap) or more"))
	}
	if _, err := whisper.ParseWindow(c.WhisperWindow); err != nil {
		errs = append(errs, fmt.Errorf("REPLYD_WHISPER_WINDOW: %w", err))
	}
	if c.WhisperShortWindow != "on" && c.WhisperShortWindow != "off" {
		errs = append(errs, fmt.Errorf("REPLYD_WHISPER_SHORT_WINDOW: %q is not on or off", c.WhisperShortWindow))
	}
	if c.MaxReplyTokens < 1 {
		errs = append(errs, errors.New("REPLYD_MAX_REPLY_TOKENS must be at least 1"))
	}
	if c.MaxBodyMiB < 1 {
		errs = append(errs, errors.New("REPLYD_MAX_BODY_MIB must be at least 1"))
	}
	if c.ColdPromptTarget < 0 {
		errs = append(errs, errors.New("REPLYD_COLD_PROMPT_TARGET must not be negative"))
	}
	if c.MaxAudio <= 0 || c.InferTimeout <= 0 || c.SessionTTL <= 0 {
		errs = append(errs, errors.New("REPLYD_MAX_AUDIO, REPLYD_INFER_TIMEOUT and REPLYD_SESSION_TTL must be positive"))
	}
	if c.LogRetention < 0 {
		errs = append(errs, errors.New("REPLYD_LOG_RETENTION must not be negative"))
	}
	if c.Seed < 0 || c.Seed > 1<<32-1 {
		errs = append(errs, errors.New("REPLYD_SEED must be between 0 and 4294967295"))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("REPLYD_LOG_FORMAT: %q is not text or json", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.StoreURL != "" && !strings.HasPrefix(c.StoreURL, "postgres://") && !strings.HasPrefix(c.StoreURL, "postgresql://") {
		errs = append(errs, errors.New("REPLYD_STORE_URL must be a postgres:// (or postgresql://) URL, or empty for the bbolt file in the data directory"))
	}
	if strings.TrimSpace(c.NodeName) == "" || len(c.NodeName) > 64 {
		errs = append(errs, errors.New("REPLYD_NODE_NAME must be 1 to 64 characters"))
	}
	return errors.Join(errs...)
}

// SpeechThreads is the threads a transcription starts with:
// REPLYD_STT_THREADS, at most the shared cores (a transcription holds that
// many of them). 0 means all the cores but one while the overlap is on, so
// that the language model evaluates the dialog on that core during the
// transcription, and all of them without it. With 0 the encoder takes the
// rest of the cores as soon as nobody wants them (SpeechThreadsMax): when
// the dialog is evaluated, or when it had little to evaluate.
func (c *Config) SpeechThreads() int {
	n := c.STTThreads
	if n == 0 {
		n = c.CPUCores
		if c.Overlap == "on" && n > 1 {
			n--
		}
	}
	return min(n, c.CPUCores)
}

// SpeechThreadsMax is the most threads a transcription runs: all the shared
// cores with REPLYD_STT_THREADS 0, else that setting.
func (c *Config) SpeechThreadsMax() int {
	if c.STTThreads == 0 {
		return c.CPUCores
	}
	return c.SpeechThreads()
}

// MemoryKeep is how long remembered pairs are kept: REPLYD_MEMORY_RETENTION,
// else REPLYD_LOG_RETENTION; 0 keeps them.
func (c *Config) MemoryKeep() time.Duration {
	if c.MemoryRetention >= 0 {
		return c.MemoryRetention
	}
	return c.LogRetention
}

// TLSEnabled reports whether replyd serves HTTPS.
func (c *Config) TLSEnabled() bool { return c.TLS != "off" || c.TLSCert != "" }

// Print writes the effective configuration, one `ENV=value` line each,
// sorted, with secrets masked.
func (c *Config) Print(w io.Writer) {
	lines := make([]string, 0, len(options()))
	for _, o := range options() {
		v := o.get(c)
		if o.redact != nil {
			v = o.redact(v)
		} else if o.secret && v != "" {
			v = mask(v)
		}
		lines = append(lines, fmt.Sprintf("%s=%s", o.env, v))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// redacted gives o a redact function for `replyd config`.
func redacted(o option, f func(string) string) option {
	o.redact = f
	return o
}

// redactURL shows a URL with its password (and any password= parameter)
// masked, so that `replyd config` still tells where the database is.
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return mask(v)
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "REDACTED")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// defaultNodeName is the hostname, or "replyd" when it cannot be read.
func defaultNodeName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "replyd"
}

// mask hides a secret, keeping only a hint of its length. URLs are secrets
// too (webhook and ntfy URLs often carry a token).
func mask(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return "****(" + strconv.Itoa(len(s)) + " chars)"
}

// ParseDuration accepts Go durations ("90s", "15m", "24h") and a day suffix
// ("7d", "30d"). "0" is zero.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	if strings.HasSuffix(s, "d") {
		n, err := strconv.ParseFloat(strings.TrimSuffix(s, "d"), 64)
		if err != nil || n < 0 || n > 36500 {
			return 0, fmt.Errorf("invalid duration %q (use e.g. 30s, 15m, 24h, 7d)", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use e.g. 30s, 15m, 24h, 7d)", s)
	}
	return d, nil
}

// FormatDuration prints whole days as "Nd", whole hours as "Nh", whole
// minutes as "Nm", anything else as Go does ("90s" is "1m30s").
func FormatDuration(d time.Duration) string {
	switch {
	case d > 0 && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}
