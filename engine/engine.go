// Package engine holds replyd's inference pipeline: decode the uploaded audio,
// transcribe it, build the prompt and generate candidate replies. It knows
// nothing of HTTP and compiles no C: the speech-to-text and language-model
// engines live in the cgo leaves engine/whisper and engine/llm, which implement
// the Transcriber and Generator interfaces declared here.
package engine

import (
	"context"
	"strings"
	"time"
)

// Dialog roles accepted in a Message.
const (
	RoleSpeaker        = "speaker"
	RoleDisabledPerson = "disabled_person"
)

// Message is one turn of the dialog between the conversation partner
// (RoleSpeaker) and the AAC user (RoleDisabledPerson).
type Message struct {
	Role    string
	Content string
	// Audio marks the speaker message whose content comes from the uploaded
	// recording. The pipeline fills Content with the transcript.
	Audio bool
}

// Profile is what the payload says about the AAC user.
type Profile struct {
	Biography   string // disabled_person_biography
	Persona     string
	UserProfile string
	// Language is the partner's language, the payload's language: the
	// transcription hint (BCP 47 such as "en" or "pt-BR"). Empty or "auto"
	// means detect it from the recording.
	Language string
	// ReplyLanguage is the AAC user's language, the payload's
	// reply_language (BCP 47). Empty means Language, else the language the
	// recording was transcribed in (see ReplyLanguage).
	ReplyLanguage string
}

// ReplyLanguageFor is the language replies are asked in: p.ReplyLanguage,
// else p.Language unless it is empty or "auto", else heard (the language
// the recording was transcribed in), else LanguageUnknown.
func (p Profile) ReplyLanguageFor(heard string) string {
	for _, l := range []string{p.ReplyLanguage, p.Language, heard} {
		if l = strings.TrimSpace(l); l != "" && l != "auto" {
			return l
		}
	}
	return LanguageUnknown
}

// Request is one validated /v1/infer call.
type Request struct {
	Messages []Message
	Profile  Profile

	UserID   string
	DialogID string
	// ParentInferenceID is the turn a steered request refines (the API's
	// concern; the pipeline ignores it).
	ParentInferenceID string
	StepID            string
	TimeWindowSec     int

	// MemoryUser names the user whose remembered replies may go into the
	// prompt as examples (the payload's remember: true); "" for none. It is
	// a pseudonym, never the user_id itself.
	MemoryUser string

	MaxCandidates int     // 1..MaxCandidatesLimit, already defaulted by the API
	Temperature   float64 // 0..2, already defaulted by the API
	// Seed makes sampling repeatable when non-zero.
	Seed uint32
	// Steer, when set, constrains every candidate (a steered request).
	Steer *Steer

	// SystemPrompt is the current system prompt from the store.
	SystemPrompt string
	// PromptVersion names SystemPrompt's version, read with it, and
	// UserTag the user's pseudonym a remembered pair is filed under: what
	// the inference record says of the request (the API's concern; the
	// pipeline ignores them).
	PromptVersion string
	UserTag       string

	// Audio is the raw uploaded recording, nil when none was sent.
	Audio []byte
	// AudioContentType is the media type the client declared on the part.
	// It is informational: the decoder detects the format from the bytes.
	AudioContentType string
	// PCM, when set, is audio already decoded (16 kHz mono, a live turn):
	// it stands for Audio and is not decoded again.
	PCM []float32
	// VoiceProbs, when set with PCM, are the live turn detector's speech
	// probabilities of PCM's windows (TurnEvent.Probs): the speech is kept
	// by them when the VAD can (SpeechByProbs), not detected again.
	VoiceProbs []float32
	// Heard, when set, is the transcript of PCM computed ahead by
	// Pipeline.HearAhead (a speculative pass whose audio did not change):
	// the speech stage uses it instead of transcribing again.
	Heard *HeardAhead

	// OnTranscript, when set, is called once with the transcript, its
	// language and any warning about that language as soon as
	// speech-to-text has produced it, before the candidates are generated,
	// on the goroutine that called Infer: what the "transcript" event
	// reports. It is not called for requests without audio, for a
	// recording without speech, or when speech-to-text fails.
	OnTranscript func(Heard)
	// OnCandidate, when set, is called with each candidate as soon as it
	// is complete, in the order of the final Result.Candidates and with
	// the same Rank, Text and Language (see GenerateRequest.OnCandidate),
	// before Infer returns. A request that ends early (canceled, its
	// deadline) may have had some called. It is called on the language
	// model's goroutine, between its decode steps: it must return at once
	// (hand the candidate to another goroutine, never wait for a client).
	OnCandidate func(Candidate)
}

// Heard is what speech-to-text made of a recording, for Request.OnTranscript.
type Heard struct {
	Transcript string
	// Language is the language the recording was transcribed in (a
	// Whisper language code such as "de").
	Language string
	// Warning, when not empty, says why Language is not the language the
	// request asked for (Transcript.Warning).
	Warning string
}

// LanguageUnknown is a candidate's Language when neither the payload nor
// the recording told the reply's language: BCP 47's "und" (undetermined).
const LanguageUnknown = "und"

// Candidate is one suggested reply: the spec's AnswerCandidate plus the score
// it was ranked by.
type Candidate struct {
	Text string
	// Rank is the order the candidate was sent in (1 = first): the order
	// in which the candidates completed, those completing in the same
	// decode step by MeanLogProb, best first.
	Rank   int
	Length int // tokens generated
	// Language is the language the reply was asked in; the pipeline sets
	// it (see Pipeline.Infer), engines leave it empty.
	Language string
	// MeanLogProb is the mean token log-probability: the order among
	// candidates that completed together.
	MeanLogProb float64
}

// Timings records how long each stage of one inference took.
type Timings struct {
	Decode     time.Duration // audio bytes to 16 kHz PCM
	STT        time.Duration // speech to text
	Prompt     time.Duration // prompt rendering and evaluation
	Generation time.Duration // sampling the candidates
	Queue      time.Duration // waiting for the language model
	Total      time.Duration
}

// Result is what the pipeline returns for one Request.
type Result struct {
	// Transcript is the text of the recording; HasTranscript tells whether
	// audio was sent at all (an empty transcript is a valid result for silence).
	Transcript    string
	HasTranscript bool
	// TranscriptLanguage is the language the speech-to-text step used.
	TranscriptLanguage string
	// TranscriptWarning, when not empty, says why TranscriptLanguage is not
	// the language the payload asked for (Transcript.Warning).
	TranscriptWarning string
	// NoSpeech: the recording holds no speech (voice activity detection
	// found none, or Whisper's no-speech rule silenced it). The transcript
	// is empty and no candidates were generated.
	NoSpeech     bool
	AudioSeconds float64
	Candidates   []Candidate
	Timings      Timings
	// Language-model token counts: the prompt, the part of it reused from
	// the dialog prefix cache, and every token sampled.
	PromptTokens, CachedTokens, GenTokens int

	// PartnerTurn is the partner's turn the candidates answer (the last
	// speaker message, transcript included): what a remembered pair keeps.
	PartnerTurn string
	// Examples is the number of the user's remembered replies that went into
	// the prompt, and ExampleTokens the prompt tokens they took.
	Examples, ExampleTokens int
	// HistorySent and HistoryUsed: see Generation.
	HistorySent, HistoryUsed int
	// RecallErr is why the remembered replies could not be read, if they
	// could not; the inference went on without them.
	RecallErr error
	// SteerExhausted: a steered request got fewer distinct matching
	// candidates than it asked for within the reply budget.
	SteerExhausted bool
	// Model and SpeechModel name the model files that made the answer
	// (Generation.Model, Transcript.Model); "" when unknown.
	Model, SpeechModel string
}

// Example is one remembered exchange of the AAC user: what the partner said
// and what the user really answered.
type Example struct {
	Partner string
	Reply   string
}

// MaxExamples is the most remembered replies one prompt receives.
const MaxExamples = 3

// Recaller finds a user's remembered replies most similar to the partner's
// current turn. Implementations must be safe for concurrent use.
type Recaller interface {
	// Recall returns at most k examples for user, most similar first; none
	// when the user has no memory.
	Recall(ctx context.Context, user, partnerTurn string, k int) ([]Example, error)
}

// PartnerTurn returns the content of the last speaker message: the
// partner's turn a reply answers ("" when there is none).
func PartnerTurn(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleSpeaker {
			return strings.TrimSpace(msgs[i].Content)
		}
	}
	return ""
}

// TranscribeOptions tunes one transcription.
type TranscribeOptions struct {
	// Language is a Whisper language code ("en", "de", ...). Empty means
	// detect it (multilingual models) or English (English-only models).
	Language string
	// Threads is how many threads the transcription starts with: the cores
	// the caller holds for it. 0 means the engine's own setting.
	Threads int
	// Grow, when set, is called between the steps of the encoder (its
	// layers and their halves) with the most threads the engine would run,
	// and returns how many it may run from then on, never fewer than
	// Threads: the caller lends it cores that nobody else wants and takes
	// them back when somebody does. Once the encoder is done the engine
	// calls it with Threads, giving back what it was lent (a decoder step
	// is bound by memory, not by threads).
	Grow func(most int) int
}

// Transcript is the result of speech-to-text.
type Transcript struct {
	Text     string
	Language string
	// Warning, when not empty, says in words for the client why Language
	// is not the requested TranscribeOptions.Language: an English-only
	// model transcribes everything as English, and a language the model
	// does not know is detected instead. It never quotes the request.
	Warning string
	Tokens  []int
	// Stage timings, for /metrics and the admin page.
	Mel, Encoder, Decoder time.Duration
	// Model names the model file that transcribed (its base name), when
	// the Transcriber knows it.
	Model string
}

// Heard is what a client is told of t (Request.OnTranscript).
func (t Transcript) Heard() Heard {
	return Heard{Transcript: t.Text, Language: t.Language, Warning: t.Warning}
}

// Transcriber turns 16 kHz mono float32 samples into text. Implementations
// must be safe for concurrent use (they may serialise internally).
type Transcriber interface {
	Transcribe(ctx context.Context, pcm []float32, opts TranscribeOptions) (Transcript, error)
}

// GenerateRequest is everything the language model needs for one request.
// Messages already carry the transcript in place of the audio marker.
type GenerateRequest struct {
	SystemPrompt string
	Profile      Profile
	// ReplyLanguage is the language the candidates are asked in (BCP 47 or
	// a Whisper code), already resolved by the pipeline
	// (Profile.ReplyLanguageFor); "" or LanguageUnknown asks for none. The
	// prompt says it after the dialog's cached head, so that a change of
	// language keeps the dialog prefix cache.
	ReplyLanguage string
	Messages      []Message
	DialogID      string
	// Examples are the user's remembered replies most similar to the
	// partner's current turn. The prompt shows them after the dialog's
	// earlier turns and just before the partner's current turn (so the
	// dialog prefix cache stays valid), within a fixed token budget.
	Examples []Example

	N           int
	Temperature float64
	Seed        uint32
	// Steer, when set, constrains every candidate: none breaks it.
	Steer *Steer
	// OnCandidate, when set, is called with each candidate as soon as it
	// is complete and kept (not empty, no duplicate of one sent before),
	// at most N times: Rank 1 for the first call, 2 for the next, and so
	// on, the Generation's Candidates being the same candidates in the
	// same order. Candidates that complete in the same decode step are
	// sent best mean log-probability first. It is called on the owner
	// goroutine of the engine and must return at once.
	OnCandidate func(Candidate)

	// TranscriptReserve is how many prompt tokens the partner's current turn
	// may take when its text comes from a recording: the prompt is fitted to
	// the context as if that turn took at least this many, both when the
	// turns before it are evaluated ahead (Prefiller) and when the whole
	// prompt is, so that both drop the same oldest turns. 0 for typed turns.
	TranscriptReserve int
}

// Generation is what a Generator returns: ranked candidates and timings.
type Generation struct {
	Candidates   []Candidate
	PromptTokens int
	CachedTokens int // prompt tokens reused from the dialog prefix cache
	Queue        time.Duration
	Prompt       time.Duration
	Generation   time.Duration
	GenTokens    int
	// Examples went into the prompt, taking ExampleTokens of it.
	Examples, ExampleTokens int
	// HistorySent is how many (non-empty) messages of the dialog came
	// before the partner's current turn; HistoryUsed how many of them, the
	// most recent, went into the prompt (the rest were cut to the
	// cold-prompt target or the context).
	HistorySent, HistoryUsed int
	// SteerExhausted: fewer distinct candidates meeting req.Steer than
	// asked for could be sampled within the reply budget.
	SteerExhausted bool
	// Model names the model file that generated (its base name), when
	// the Generator knows it.
	Model string
}

// Generator produces candidate replies. Implementations must be safe for
// concurrent use. The pipeline's Scheduler admits requests (Scheduler.LLM)
// before Generate; an implementation serves them in arrival order and
// returns a KindCanceled error when ctx ends first.
type Generator interface {
	Generate(ctx context.Context, req GenerateRequest) (Generation, error)
}

// Prefiller is implemented by a Generator that can evaluate the prompt of a
// request ahead, while its recording is still being transcribed.
type Prefiller interface {
	// Prefill queues the evaluation of req's prompt up to its last turn: the
	// system message, the profile and the earlier turns (a trailing speaker
	// message in req is left out, since the transcript joins it). It returns
	// at once. A later Generate of the same dialog, with the transcript as
	// its last speaker turn and the same TranscriptReserve, then evaluates
	// only what follows. Prefill is an optimisation: it may be skipped (a
	// closed engine, a prompt that leaves less than TranscriptReserve tokens),
	// and its work is lost when ctx ends first.
	Prefill(ctx context.Context, req GenerateRequest)
}

// EngineStatus describes one engine for /healthz and the admin page.
type EngineStatus struct {
	Name      string    `json:"name"`  // "llm" or "stt"
	Model     string    `json:"model"` // path of the model file
	Ready     bool      `json:"ready"`
	Demo      bool      `json:"demo"` // a generated demo model is in use
	Error     string    `json:"error,omitempty"`
	Backend   string    `json:"backend,omitempty"` // e.g. "cpu", "cuda"
	LoadedAt  time.Time `json:"loaded_at,omitempty"`
	QueueSize int       `json:"queue_depth,omitempty"`
	// EnglishOnly marks a speech-to-text model that transcribes English
	// only; NonEnglishRequests counts the requests since start that asked
	// it for another language (they were transcribed as English).
	EnglishOnly        bool  `json:"english_only,omitempty"`
	NonEnglishRequests int64 `json:"non_english_requests,omitempty"`
	// Window is the speech-to-text encoder's window rule
	// (REPLYD_WHISPER_WINDOW, in words); WindowShortened counts the turns
	// encoded on a shortened window since start, WindowRetries those the
	// safety net decoded again at the full 30 s window.
	Window          string `json:"window,omitempty"`
	WindowShortened int64  `json:"window_shortened,omitempty"`
	WindowRetries   int64  `json:"window_retries,omitempty"`
	// Warning says, in words for the administrator, what the engine does
	// not do as asked although it runs (such as requests for languages an
	// English-only model cannot transcribe); absent when nothing.
	Warning string `json:"warning,omitempty"`
}

// StatusReporter is implemented by engines that can describe their state.
type StatusReporter interface {
	Status() EngineStatus
}
