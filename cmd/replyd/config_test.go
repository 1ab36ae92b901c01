package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigPrecedence(t *testing.T) {
	env := envMap(map[string]string{"REPLYD_ADDR": ":9000", "REPLYD_QUEUE_SIZE": "4", "REPLYD_LOG_RETENTION": "7d"})
	cfg, rest, err := LoadConfig("serve", []string{"--addr", "127.0.0.1:7000", "extra"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:7000" {
		t.Errorf("flag must win over env: addr %q", cfg.Addr)
	}
	if cfg.QueueSize != 4 {
		t.Errorf("env must win over default: queue %d", cfg.QueueSize)
	}
	if cfg.LogRetention != 7*24*time.Hour {
		t.Errorf("retention %v", cfg.LogRetention)
	}
	if cfg.DataDir != "./data" || cfg.LLMModel != DefaultLLMModel || cfg.OTPChannel != "console" || cfg.MaxBodyMiB != 25 {
		t.Errorf("defaults: %+v", cfg)
	}
	if len(rest) != 1 || rest[0] != "extra" {
		t.Errorf("rest %q", rest)
	}
}

func TestConfigRejects(t *testing.T) {
	cases := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"REPLYD_OTP_CHANNEL": "pigeon"}, nil, "unknown channel"},
		{map[string]string{"REPLYD_QUEUE_SIZE": "many"}, nil, "REPLYD_QUEUE_SIZE"},
		{nil, []string{"--tls", "on"}, "REPLYD_TLS=on needs"},
		{map[string]string{"REPLYD_TLS_CERT": "c.pem"}, nil, "set together"},
		{map[string]string{"REPLYD_LOG_RETENTION": "forever"}, nil, "invalid duration"},
		{nil, []string{"--threads", "0"}, "at least 1"},
		{nil, []string{"--log-level", "loud"}, "REPLYD_LOG_LEVEL"},
		{nil, []string{"--seed", "-3"}, "REPLYD_SEED"},
		{map[string]string{"REPLYD_CORS_ORIGINS": "*"}, nil, `REPLYD_CORS_ORIGINS: "*" is not allowed`},
		{map[string]string{"REPLYD_CORS_ORIGINS": "https://a.example, aac.example"}, nil, `"aac.example" is not an origin`},
		{nil, []string{"--public-url", "replyd.local:8080"}, "REPLYD_PUBLIC_URL"},
		{nil, []string{"--public-url", "https://replyd.local/app/"}, "REPLYD_PUBLIC_URL"},
		{map[string]string{"REPLYD_STORE_URL": "/var/lib/replyd/replyd.db"}, nil, "REPLYD_STORE_URL must be a postgres://"},
		{map[string]string{"REPLYD_NODE_NAME": " "}, nil, "REPLYD_NODE_NAME"},
		{map[string]string{"REPLYD_TRUSTED_PROXIES": "10.0.0.1, proxy.lan"}, nil, "REPLYD_TRUSTED_PROXIES"},
		{map[string]string{"REPLYD_ADMIN_KEY": "aaaaaaaaaaaaaaaa"}, nil, "use at least 20"},
		{nil, []string{"--admin-key", "abcdefghijklmnopqrstuvwxyz"}, "too easy to guess"},
		{map[string]string{"REPLYD_OTP_TTL": "0"}, nil, "REPLYD_OTP_TTL"},
		{map[string]string{"REPLYD_LOG_MAX_MB": "-1"}, nil, "REPLYD_LOG_MAX_MB"},
		{nil, []string{"--whisper-fallback", "sometimes"}, "REPLYD_WHISPER_FALLBACK"},
		{map[string]string{"REPLYD_WHISPER_MAX_TOKENS": "-1"}, nil, "REPLYD_WHISPER_MAX_TOKENS"},
		{map[string]string{"REPLYD_WHISPER_WINDOW": "short"}, nil, "REPLYD_WHISPER_WINDOW"},
		{nil, []string{"--whisper-window", "0"}, "REPLYD_WHISPER_WINDOW"},
		{map[string]string{"REPLYD_WHISPER_SHORT_WINDOW": "yes"}, nil, "REPLYD_WHISPER_SHORT_WINDOW"},
	}
	for _, c := range cases {
		_, _, err := LoadConfig("serve", c.args, envMap(c.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v args %v: err %v, want it to mention %q", c.env, c.args, err, c.want)
		}
	}
}

func TestConfigPrintMasksSecrets(t *testing.T) {
	env := envMap(map[string]string{
		"REPLYD_ADMIN_KEY":          "super-secret-admin-key",
		"REPLYD_OTP_WEBHOOK_URL":    "http://hook.lan/t0ken",
		"REPLYD_TELEGRAM_BOT_TOKEN": "123:abc",
		"REPLYD_GOTIFY_TOKEN":       "gotify-token-value",
		"REPLYD_OTP_CHANNEL":        "webhook",
		"REPLYD_STORE_URL":          "postgres://replyd:pg-pass-word@db.lan:5432/replyd?sslmode=verify-full",
	})
	cfg, _, err := LoadConfig("config", nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	cfg.Print(&buf)
	out := buf.String()
	if !strings.Contains(out, "REPLYD_STORE_URL=postgres://replyd:REDACTED@db.lan:5432/replyd?sslmode=verify-full\n") {
		t.Errorf("the store URL is not shown with only its password hidden:\n%s", out)
	}
	for _, secret := range []string{"super-secret-admin-key", "t0ken", "123:abc", "gotify-token-value", "pg-pass-word"} {
		if strings.Contains(out, secret) {
			t.Errorf("config output shows secret %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"REPLYD_ADMIN_KEY=****(22 chars)", "REPLYD_OTP_CHANNEL=webhook", "REPLYD_ADDR=:8080", "REPLYD_LOG_RETENTION=30d"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("config output lacks %q:\n%s", want, out)
		}
	}
}

func TestServeHelpListsEveryOption(t *testing.T) {
	var buf bytes.Buffer
	if code := run(t.Context(), []string{"serve", "--help"}, envMap(nil), io.Discard, &buf); code != 0 {
		t.Fatalf("serve --help exited %d", code)
	}
	for _, o := range options() {
		if !strings.Contains(buf.String(), "-"+o.flag) || !strings.Contains(buf.String(), o.env) {
			t.Errorf("serve --help lacks -%s / %s", o.flag, o.env)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "90s": 90 * time.Second, "15m": 15 * time.Minute, "7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "-1d", "7 days", "1e9d"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	if FormatDuration(30*24*time.Hour) != "30d" || FormatDuration(90*time.Second) != "1m30s" {
		t.Error("FormatDuration")
	}
}

func TestUnknownCommand(t *testing.T) {
	var buf bytes.Buffer
	if code := run(t.Context(), []string{"frobnicate"}, envMap(nil), io.Discard, &buf); code != 2 || !strings.Contains(buf.String(), "unknown command") {
		t.Fatalf("code %d: %s", code, buf.String())
	}
}

func TestConfigTrustedProxies(t *testing.T) {
	cfg, _, err := LoadConfig("serve", []string{"--trusted-proxies", "10.0.0.1,10.2.0.0/16"}, envMap(map[string]string{"REPLYD_TRUSTED_PROXIES": "192.168.0.1"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.TrustedNets) != 2 || cfg.TrustedNets[0].String() != "10.0.0.1/32" || cfg.TrustedNets[1].String() != "10.2.0.0/16" {
		t.Errorf("trusted nets %v", cfg.TrustedNets)
	}
	cfg, _, err = LoadConfig("serve", nil, envMap(nil), io.Discard)
	if err != nil || cfg.TrustedNets != nil {
		t.Errorf("default: %v %v", cfg.TrustedNets, err)
	}
}

// TestMemoryRetention: REPLYD_MEMORY_RETENTION, else REPLYD_LOG_RETENTION;
// texts awaiting feedback go once feedback can no longer come.
func TestMemoryRetention(t *testing.T) {
	load := func(env map[string]string) *Config {
		t.Helper()
		cfg, _, err := LoadConfig("serve", nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := load(nil).MemoryKeep(); got != 30*24*time.Hour {
		t.Errorf("default: %v, want the log retention 30d", got)
	}
	if got := load(map[string]string{"REPLYD_LOG_RETENTION": "7d"}).MemoryKeep(); got != 7*24*time.Hour {
		t.Errorf("follows REPLYD_LOG_RETENTION: %v", got)
	}
	if got := load(map[string]string{"REPLYD_LOG_RETENTION": "7d", "REPLYD_MEMORY_RETENTION": "90d"}).MemoryKeep(); got != 90*24*time.Hour {
		t.Errorf("REPLYD_MEMORY_RETENTION: %v", got)
	}
	if got := load(map[string]string{"REPLYD_MEMORY_RETENTION": "0"}).MemoryKeep(); got != 0 {
		t.Errorf("0 keeps: %v", got)
	}
	if _, _, err := LoadConfig("serve", []string{"--memory-retention", "soon"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("a bad retention was accepted")
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	feedback := now.Add(-(24*time.Hour + 10*time.Minute))
	if p, tx := memoryPruneTimes(0, now); !p.IsZero() || !tx.Equal(feedback) {
		t.Errorf("keep forever: pairs before %v, texts before %v", p, tx)
	}
	if p, tx := memoryPruneTimes(30*24*time.Hour, now); !p.Equal(now.Add(-30*24*time.Hour)) || !tx.Equal(feedback) {
		t.Errorf("30d: pairs before %v, texts before %v", p, tx)
	}
	if p, tx := memoryPruneTimes(time.Hour, now); !p.Equal(now.Add(-time.Hour)) || !tx.Equal(p) {
		t.Errorf("1h: pairs before %v, texts before %v (the shorter retention wins)", p, tx)
	}
}

func TestSpeechThreads(t *testing.T) {
	// want: the threads a transcription starts with; most: those its
	// encoder may grow to.
	for _, c := range []struct {
		env        map[string]string
		want, most int
	}{
		{map[string]string{"REPLYD_CPU_CORES": "2"}, 1, 2},
		{map[string]string{"REPLYD_CPU_CORES": "4"}, 3, 4},
		{map[string]string{"REPLYD_CPU_CORES": "2", "REPLYD_OVERLAP": "off"}, 2, 2},
		{map[string]string{"REPLYD_CPU_CORES": "1"}, 1, 1},
		{map[string]string{"REPLYD_CPU_CORES": "4", "REPLYD_STT_THREADS": "2"}, 2, 2},
		{map[string]string{"REPLYD_CPU_CORES": "2", "REPLYD_STT_THREADS": "8"}, 2, 2},
	} {
		cfg, _, err := LoadConfig("serve", nil, func(k string) string { return c.env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got, most := cfg.SpeechThreads(), cfg.SpeechThreadsMax(); got != c.want || most != c.most {
			t.Errorf("%v: %d speech-to-text threads growing to %d, want %d and %d", c.env, got, most, c.want, c.most)
		}
	}
	if _, _, err := LoadConfig("serve", []string{"--stt-threads", "-1"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("REPLYD_STT_THREADS -1 was accepted")
	}
}

// TestWhisperMaxTokens: REPLYD_WHISPER_MAX_TOKENS k (whisper.cpp's
// max_tokens, k text tokens) is Whisper's cap k+1 (the closing
// <|endoftext|> counted); 0 leaves the model's own; the flag beats the env.
func TestWhisperMaxTokens(t *testing.T) {
	cfg, _, err := LoadConfig("serve", []string{"--whisper-max-tokens", "15"}, envMap(map[string]string{"REPLYD_WHISPER_MAX_TOKENS": "40"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WhisperMaxTokens != 15 || whisperMaxTokens(cfg.WhisperMaxTokens) != 16 {
		t.Errorf("max tokens %d (cap %d), want 15 (cap 16)", cfg.WhisperMaxTokens, whisperMaxTokens(cfg.WhisperMaxTokens))
	}
	if whisperMaxTokens(0) != 0 {
		t.Errorf("0 (off) maps to %d, want 0 (the model's default)", whisperMaxTokens(0))
	}
}
