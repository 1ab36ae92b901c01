package api

// The bounds the API enforces, and their rendering in messages and documents.

import (
	"strconv"
	"time"
)

// Limits are the bounds the API enforces. The integration guide and the
// OpenAPI file are rendered from the same values, so what they say is what
// the server does.
type Limits struct {
	// MaxBodyBytes bounds the whole /v1/infer (and /v1/admin/try) request body.
	MaxBodyBytes int64
	// MaxPayloadBytes bounds the payload JSON part.
	MaxPayloadBytes int64
	// MaxJSONBodyBytes bounds the JSON body of admin requests.
	MaxJSONBodyBytes int64
	// MaxAudio is the longest decoded recording; the engine enforces it while
	// decoding and the guide documents it.
	MaxAudio time.Duration
	// MaxMessages bounds the number of dialog messages.
	MaxMessages int
	// MaxContentChars bounds one message's content, in Unicode code points.
	MaxContentChars int
	// MaxProfileChars bounds disabled_person_biography, persona and
	// user_profile, each in code points.
	MaxProfileChars int
	// MaxIDChars bounds user_id, dialog_id, step_id and language.
	MaxIDChars int
	// PromptBudgetTokens is how many tokens the system prompt, the profile
	// fields and the last speaker message may take together in the language
	// model's context (llm.PromptBudget of the configured context and reply
	// cap). The guide states it; 0 means unknown (the guide then says so in
	// words). The language model enforces it: 400 prompt_too_long.
	PromptBudgetTokens int
	// MaxCandidates is the largest accepted options.max_candidates;
	// DefaultCandidates is used when it is omitted.
	MaxCandidates     int
	DefaultCandidates int
	// DefaultTemperature is used when options.temperature is omitted; the
	// accepted range is 0 to MaxTemperature.
	DefaultTemperature float64
	MaxTemperature     float64
	// InferTimeout is the deadline of one inference, queueing included.
	InferTimeout time.Duration
	// SessionTTL is the lifetime of an admin session.
	SessionTTL time.Duration
	// OTPTTL is the lifetime of a one-time code; OTPResendInterval the least
	// time between two sends from one client address; OTPMaxAttempts the
	// wrong codes one address may try in 15 minutes (a wrong code never
	// burns the code: see login.go for the global lock).
	OTPTTL            time.Duration
	OTPResendInterval time.Duration
	OTPMaxAttempts    int
	// AuthFailuresPerMinute is how many failed authentications (API key,
	// admin credential) one client address may make in a minute; further
	// ones get 429 while valid credentials are still served.
	AuthFailuresPerMinute int
	// DefaultRateLimit is a new key's rate_limit_per_minute when the create
	// request omits it; MaxRateLimit is the largest accepted value.
	DefaultRateLimit int
	MaxRateLimit     int
	// DefaultListLimit and MaxListLimit bound the limit query parameter of
	// the key, log and prompt-history lists.
	DefaultListLimit int
	MaxListLimit     int
	// DefaultWindow is the logs and stats window when neither window nor
	// since is given; MaxWindow the longest accepted; MaxSeriesBuckets the
	// most buckets a stats series may have.
	DefaultWindow    time.Duration
	MaxWindow        time.Duration
	MaxSeriesBuckets int
	// MaxPromptChars bounds the system prompt, in code points.
	MaxPromptChars int
	// UploadMemoryBytes bounds the request bodies held in memory at once;
	// a body that does not fit is refused with 503 before it is read.
	UploadMemoryBytes int64
	// MaxInflightPerKey bounds the requests one API key has in progress;
	// MaxConnsPerAddr the connections one client address holds (Listener).
	MaxInflightPerKey int
	MaxConnsPerAddr   int
	// MinBodyRate (bytes/s) is the slowest a request body may arrive once
	// BodyRateGrace has passed; slower bodies are cut with 408.
	MinBodyRate   int64
	BodyRateGrace time.Duration
	// RequestReadTimeout bounds the reading of a whole request (the
	// ReadTimeout of HTTPServer); the body rate guard never extends a
	// deadline past it.
	RequestReadTimeout time.Duration
	// MinFreeBytes is the free space of the data disk under which /healthz
	// and the Status view say "degraded".
	MinFreeBytes int64
	// PairingTTL is how long a tablet pairing code works. At most
	// PairAttemptsPerAddress POST /v1/pair calls per client address (IPv6:
	// per /64) and PairAttemptsTotal across all addresses are answered in
	// each one-minute window; MaxPendingPairings bounds the unused codes.
	PairingTTL             time.Duration
	PairAttemptsPerAddress int
	PairAttemptsTotal      int
	MaxPendingPairings     int
	// OverloadedRetryAfter and NotReadyRetryAfter are the Retry-After values
	// of 503 overloaded and 503 not_ready.
	OverloadedRetryAfter time.Duration
	NotReadyRetryAfter   time.Duration
	// Live sessions (live.go): LiveTicketTTL is how long a ticket opens a
	// session; LiveIdle how long a session may receive nothing at all;
	// LivePing how often the server pings (and how long it waits for the
	// pong); LiveWriteTimeout how long an event may take to be written;
	// MaxLiveFrameBytes bounds one message; MaxLivePerAddr the sessions one
	// client address holds.
	LiveTicketTTL     time.Duration
	LiveIdle          time.Duration
	LivePing          time.Duration
	LiveWriteTimeout  time.Duration
	MaxLiveFrameBytes int64
	MaxLivePerAddr    int
	// LiveRealtimeFactor bounds how much faster than real time a session
	// may send audio (after a second of slack): every sample costs voice
	// detection.
	LiveRealtimeFactor float64
	// KeyRecheck is how often the keys of work in progress (live sessions,
	// inferences) are read again, so that a key revoked on another box
	// sharing the store ends its work within it (rights.go).
	KeyRecheck time.Duration
	// LiveCaptionEvery is the turn audio between two caption passes (the
	// partner's words so far, while they speak); negative: no captions.
	LiveCaptionEvery time.Duration
}

// DefaultLimits returns the limits replyd ships with.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:          25 << 20,
		MaxPayloadBytes:       1 << 20,
		MaxJSONBodyBytes:      1 << 20,
		MaxAudio:              120 * time.Second,
		MaxMessages:           200,
		MaxContentChars:       4000,
		MaxProfileChars:       8000,
		MaxIDChars:            200,
		MaxCandidates:         8,
		DefaultCandidates:     3,
		DefaultTemperature:    0.7,
		MaxTemperature:        2,
		InferTimeout:          30 * time.Second,
		SessionTTL:            12 * time.Hour,
		OTPTTL:                5 * time.Minute,
		OTPResendInterval:     30 * time.Second,
		OTPMaxAttempts:        5,
		AuthFailuresPerMinute: 10,
		DefaultRateLimit:      60,
		MaxRateLimit:          100000,
		DefaultListLimit:      100,
		MaxListLimit:          1000,
		DefaultWindow:         24 * time.Hour,
		MaxWindow:             366 * 24 * time.Hour,
		MaxSeriesBuckets:      1000,
		MaxPromptChars:        32000,
		MinFreeBytes:          512 << 20,
		MaxInflightPerKey:     8,
		MaxConnsPerAddr:       32,
		MinBodyRate:           64 << 10,
		BodyRateGrace:         10 * time.Second,
		RequestReadTimeout:    2 * time.Minute,
		OverloadedRetryAfter:  2 * time.Second,
		NotReadyRetryAfter:    5 * time.Second,
		LiveTicketTTL:         30 * time.Second,
		LiveIdle:              2 * time.Minute,
		LivePing:              20 * time.Second,
		LiveWriteTimeout:      10 * time.Second,
		MaxLiveFrameBytes:     64 << 10,
		MaxLivePerAddr:        4,
		LiveRealtimeFactor:    2,
		KeyRecheck:            2 * time.Second,
		LiveCaptionEvery:      time.Second,

		PairingTTL:             10 * time.Minute,
		PairAttemptsPerAddress: 5,
		PairAttemptsTotal:      30,
		MaxPendingPairings:     10,
	}
}

// withDefaults fills every zero field of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set64 := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	set64(&l.MaxBodyBytes, d.MaxBodyBytes)
	set64(&l.MaxPayloadBytes, d.MaxPayloadBytes)
	set64(&l.MaxJSONBodyBytes, d.MaxJSONBodyBytes)
	setDur(&l.MaxAudio, d.MaxAudio)
	setInt(&l.MaxMessages, d.MaxMessages)
	setInt(&l.MaxContentChars, d.MaxContentChars)
	setInt(&l.MaxProfileChars, d.MaxProfileChars)
	setInt(&l.MaxIDChars, d.MaxIDChars)
	setInt(&l.MaxCandidates, d.MaxCandidates)
	setInt(&l.DefaultCandidates, d.DefaultCandidates)
	if l.DefaultCandidates > l.MaxCandidates {
		l.DefaultCandidates = l.MaxCandidates
	}
	setF(&l.MaxTemperature, d.MaxTemperature)
	if l.DefaultTemperature <= 0 || l.DefaultTemperature > l.MaxTemperature {
		l.DefaultTemperature = d.DefaultTemperature
	}
	setDur(&l.InferTimeout, d.InferTimeout)
	setDur(&l.SessionTTL, d.SessionTTL)
	setDur(&l.OTPTTL, d.OTPTTL)
	setDur(&l.OTPResendInterval, d.OTPResendInterval)
	setInt(&l.OTPMaxAttempts, d.OTPMaxAttempts)
	setInt(&l.AuthFailuresPerMinute, d.AuthFailuresPerMinute)
	setInt(&l.DefaultRateLimit, d.DefaultRateLimit)
	setInt(&l.MaxRateLimit, d.MaxRateLimit)
	setInt(&l.DefaultListLimit, d.DefaultListLimit)
	setInt(&l.MaxListLimit, d.MaxListLimit)
	setDur(&l.DefaultWindow, d.DefaultWindow)
	setDur(&l.MaxWindow, d.MaxWindow)
	setInt(&l.MaxSeriesBuckets, d.MaxSeriesBuckets)
	setInt(&l.MaxPromptChars, d.MaxPromptChars)
	set64(&l.MinFreeBytes, d.MinFreeBytes)
	if l.UploadMemoryBytes <= 0 {
		// Four largest bodies: what the speech-to-text stage can use.
		l.UploadMemoryBytes = 4 * l.MaxBodyBytes
	}
	setInt(&l.MaxInflightPerKey, d.MaxInflightPerKey)
	setInt(&l.MaxConnsPerAddr, d.MaxConnsPerAddr)
	set64(&l.MinBodyRate, d.MinBodyRate)
	setDur(&l.BodyRateGrace, d.BodyRateGrace)
	setDur(&l.RequestReadTimeout, d.RequestReadTimeout)
	setDur(&l.OverloadedRetryAfter, d.OverloadedRetryAfter)
	setDur(&l.NotReadyRetryAfter, d.NotReadyRetryAfter)
	setDur(&l.LiveTicketTTL, d.LiveTicketTTL)
	setDur(&l.LiveIdle, d.LiveIdle)
	setDur(&l.LivePing, d.LivePing)
	setDur(&l.LiveWriteTimeout, d.LiveWriteTimeout)
	set64(&l.MaxLiveFrameBytes, d.MaxLiveFrameBytes)
	setInt(&l.MaxLivePerAddr, d.MaxLivePerAddr)
	setF(&l.LiveRealtimeFactor, d.LiveRealtimeFactor)
	setDur(&l.KeyRecheck, d.KeyRecheck)
	if l.LiveCaptionEvery == 0 { // negative: off
		l.LiveCaptionEvery = d.LiveCaptionEvery
	}
	setDur(&l.PairingTTL, d.PairingTTL)
	setInt(&l.PairAttemptsPerAddress, d.PairAttemptsPerAddress)
	setInt(&l.PairAttemptsTotal, d.PairAttemptsTotal)
	setInt(&l.MaxPendingPairings, d.MaxPendingPairings)
	return l
}

// Limits returns the limits the server enforces, defaults filled in.
func (s *Server) Limits() Limits { return s.limits }

// formatBytes renders n as a whole number of MiB or KiB when it is one, or
// bytes otherwise; client.md uses the same rendering.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	default:
		return strconv.FormatInt(n, 10) + " bytes"
	}
}
