package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// DecodeFunc turns uploaded audio bytes into 16 kHz mono float32 samples,
// refusing recordings longer than max before allocating for them. Its errors
// wrap the sentinels of engine/audio.
type DecodeFunc func(data []byte, max time.Duration) ([]float32, error)

// Pipeline runs one inference: decode → transcribe → prompt → candidates.
// Its fields are set once at start and never changed; it is safe for
// concurrent use when its engines are.
type Pipeline struct {
	Decode DecodeFunc
	STT    Transcriber
	LLM    Generator
	// VAD keeps only the speech of a recording before it is transcribed;
	// nil transcribes the whole recording.
	VAD      SpeechFilter
	MaxAudio time.Duration // longest accepted recording
	Now      func() time.Time
	// Memory, when set, supplies a remembering user's earlier replies as
	// examples for the prompt (Request.MemoryUser).
	Memory Recaller

	// Sched admits requests into the stages and gives their work cores
	// (see Scheduler); the language model must take its cores from the
	// same one. Nil: a scheduler with no bounds, made on first use.
	Sched *Scheduler
	// Overlap evaluates the prompt up to the partner's current turn while
	// the recording is being transcribed, when LLM is a Prefiller. It uses
	// only the cores the transcription leaves free (PriorityAhead).
	Overlap bool

	schedOnce sync.Once
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pipeline) sched() *Scheduler {
	p.schedOnce.Do(func() {
		if p.Sched == nil {
			p.Sched = NewScheduler(SchedulerConfig{})
		}
	})
	return p.Sched
}

// Infer runs req through the pipeline. Errors are *Error values whose Kind
// says how the API should answer.
func (p *Pipeline) Infer(ctx context.Context, req Request) (res Result, err error) {
	start := p.now()
	defer func() { res.Timings.Total = p.now().Sub(start) }()
	s := p.sched()
	sttWork, own, release, err := s.Admit(req.hasAudio())
	if err != nil {
		return res, err
	}
	defer release(own)

	msgs := append([]Message(nil), req.Messages...)
	reserve := 0
	if req.hasAudio() {
		res.HasTranscript = true
		reserve, err = p.hear(ctx, req, msgs, &res)
		release(sttWork)
		if err != nil || res.NoSpeech {
			return res, err
		}
	}
	err = p.reply(ctx, req, msgs, reserve, &res)
	return res, err
}

// hear is the speech stage of Infer: it decodes the recording, keeps its
// speech, and transcribes it (evaluating the turns before it ahead when
// Overlap is on), writing the transcript into msgs' audio turn and res. It
// returns the transcript's token reserve for the prompt. A recording
// without speech leaves res.NoSpeech set and msgs as they were.
func (p *Pipeline) hear(ctx context.Context, req Request, msgs []Message, res *Result) (reserve int, err error) {
	s := p.sched()
	// Admitted before decoding: a request the stage would refuse costs no
	// decoding.
	if req.Heard != nil {
		return p.useHeard(req, msgs, res), nil
	}
	done, err := s.STT.Enter(ctx)
	if err != nil {
		return 0, err
	}
	var served time.Duration
	// The stage learns the time of the work itself: with one
	// transcription at a time, the wait inside Transcribe is the other
	// requests' work.
	defer func() { done(served) }()
	t0 := p.now()
	pcm := req.PCM
	if pcm == nil {
		pcm, err = p.decode(ctx, req.Audio)
	}
	res.Timings.Decode = p.now().Sub(t0)
	if err != nil {
		return 0, err
	}
	res.AudioSeconds = float64(len(pcm)) / 16000
	if p.VAD != nil {
		sp, err := p.keepSpeech(ctx, pcm, req.VoiceProbs, PriorityCommitted)
		if err != nil {
			return 0, wrapEngineErr(err, KindSTT, "voice activity detection failed")
		}
		if len(sp.PCM) == 0 {
			// No speech: Whisper never runs and nobody is answered.
			res.NoSpeech = true
			return 0, nil
		}
		pcm = sp.PCM
	}
	reserve = TranscriptReserve(time.Duration(len(pcm)) * time.Second / 16000)
	t1 := p.now()
	tr, err := p.transcribe(ctx, pcm, TranscribeOptions{Language: req.Profile.Language}, p.ahead(ctx, req, msgs, reserve))
	res.Timings.STT = p.now().Sub(t1)
	served = tr.Mel + tr.Encoder + tr.Decoder
	if err != nil {
		return 0, wrapEngineErr(err, KindSTT, "speech-to-text failed")
	}
	res.Transcript = tr.Text
	res.TranscriptLanguage = tr.Language
	res.SpeechModel = tr.Model
	res.TranscriptWarning = tr.Warning
	if strings.TrimSpace(tr.Text) == "" {
		// Whisper's no-speech rule silenced every window.
		res.Transcript = ""
		res.NoSpeech = true
		return 0, nil
	}
	for i := range msgs {
		if msgs[i].Audio {
			msgs[i].Content = tr.Text
		}
	}
	if req.OnTranscript != nil {
		req.OnTranscript(tr.Heard())
	}
	return reserve, nil
}

// ahead returns the work to start once the transcription holds its cores:
// with Overlap and a Prefiller, queueing the evaluation of the turns before
// the recording's (what the transcript will follow); else nothing.
func (p *Pipeline) ahead(ctx context.Context, req Request, msgs []Message, reserve int) func() {
	pf, ok := p.LLM.(Prefiller)
	if !ok || !p.Overlap {
		return func() {}
	}
	head := msgs
	for i, m := range msgs {
		if m.Audio {
			head = msgs[:i]
			break
		}
	}
	// The reply language is not known before the transcript, and need not
	// be: the prompt says it after the head (GenerateRequest.ReplyLanguage).
	greq := p.generateRequest(req, "", head, nil, reserve)
	return func() { pf.Prefill(ctx, greq) }
}

// reply is the language-model stage of Infer: it recalls the user's
// remembered replies, admits the request into the LLM stage and generates
// the candidates into res.
func (p *Pipeline) reply(ctx context.Context, req Request, msgs []Message, reserve int, res *Result) error {
	res.PartnerTurn = PartnerTurn(msgs)
	var examples []Example
	if req.MemoryUser != "" && p.Memory != nil && res.PartnerTurn != "" {
		// After speech-to-text: the partner's turn is what they are matched on.
		examples, res.RecallErr = p.Memory.Recall(ctx, req.MemoryUser, res.PartnerTurn, MaxExamples)
	}
	// This is the one place a candidate's language is decided: the
	// payload's reply_language, else its language, else the language the
	// recording was transcribed in (the partner's), else LanguageUnknown.
	lang := req.Profile.ReplyLanguageFor(res.TranscriptLanguage)
	done, err := p.sched().LLM.Enter(ctx)
	if err != nil {
		return err
	}
	// The language model serves one job at a time: a speculative pass's
	// prompt work must not keep this request waiting (nor, when this is
	// speculative work itself, ReplyAhead, stop its own kind).
	if PriorityOf(ctx, PriorityCommitted) != PrioritySpeculative {
		p.sched().StopSpeculative()
	}
	greq := p.generateRequest(req, lang, msgs, examples, reserve)
	if on := req.OnCandidate; on != nil {
		greq.OnCandidate = func(c Candidate) {
			c.Language = lang
			on(c)
		}
	}
	gen, err := p.LLM.Generate(ctx, greq)
	done(gen.Prompt + gen.Generation)
	res.PromptTokens, res.CachedTokens, res.GenTokens = gen.PromptTokens, gen.CachedTokens, gen.GenTokens
	res.Examples, res.ExampleTokens = gen.Examples, gen.ExampleTokens
	res.HistorySent, res.HistoryUsed = gen.HistorySent, gen.HistoryUsed
	res.SteerExhausted = gen.SteerExhausted
	res.Model = gen.Model
	res.Timings.Queue = gen.Queue
	res.Timings.Prompt = gen.Prompt
	res.Timings.Generation = gen.Generation
	if err != nil {
		return wrapEngineErr(err, KindLLM, "reply generation failed")
	}
	res.Candidates = gen.Candidates
	for i := range res.Candidates {
		res.Candidates[i].Language = lang
	}
	return nil
}

// generateRequest is what the language model gets for req with msgs,
// asking for replies in lang ("" before it is known).
func (p *Pipeline) generateRequest(req Request, lang string, msgs []Message, examples []Example, reserve int) GenerateRequest {
	if lang == LanguageUnknown {
		lang = ""
	}
	return GenerateRequest{
		SystemPrompt:      req.SystemPrompt,
		Profile:           req.Profile,
		ReplyLanguage:     lang,
		Messages:          msgs,
		DialogID:          req.DialogID,
		Examples:          examples,
		N:                 req.MaxCandidates,
		Temperature:       req.Temperature,
		Seed:              req.Seed,
		Steer:             req.Steer,
		TranscriptReserve: reserve,
	}
}

// decode decodes the recording within the scheduler's decode limit (its
// memory grows with the upload), on one core.
func (p *Pipeline) decode(ctx context.Context, data []byte) ([]float32, error) {
	end, err := p.sched().BeginDecode(ctx)
	if err != nil {
		return nil, classifyAudioErr(err)
	}
	defer end()
	pcm, err := p.Decode(data, p.MaxAudio)
	if err != nil {
		return nil, classifyAudioErr(err)
	}
	return pcm, nil
}

// keepSpeech keeps the speech of pcm: by a live turn's probabilities
// (Request.VoiceProbs) when there are some for every whole window and the
// VAD can use them, else by voice activity detection on one core taken at
// priority.
func (p *Pipeline) keepSpeech(ctx context.Context, pcm, probs []float32, priority Priority) (Speech, error) {
	if sp, ok := KeepByProbs(p.VAD, pcm, probs); ok {
		return sp, ctx.Err()
	}
	s := p.sched()
	n, err := s.AcquireAt(ctx, priority, 1, 1)
	if err != nil {
		return Speech{}, err
	}
	defer s.Release(n)
	return p.VAD.KeepSpeech(ctx, pcm)
}

// transcribe runs speech-to-text as the scheduler's one transcription,
// growing by its lending rule (Scheduler.BeginTranscription). ahead runs
// once the cores are taken, just before the transcription: work queued
// there finds them taken.
func (p *Pipeline) transcribe(ctx context.Context, pcm []float32, opts TranscribeOptions, ahead func()) (Transcript, error) {
	threads, grow, end, err := p.sched().BeginTranscription(ctx)
	if err != nil {
		return Transcript{}, err
	}
	defer end()
	ahead()
	opts.Threads, opts.Grow = threads, grow
	return p.STT.Transcribe(ctx, pcm, opts)
}

// wrapEngineErr keeps an engine's own *Error (overloaded, not ready,
// canceled) and classifies anything else as kind.
func wrapEngineErr(err error, kind Kind, msg string) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if isContextErr(err) {
		return &Error{Kind: KindCanceled, Message: "the request was canceled or timed out", Err: err}
	}
	return &Error{Kind: kind, Message: msg, Err: err}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
