package engine

import (
	"context"
	"errors"
	"strings"
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

	// STTStage and LLMStage admit requests into the two serial steps; see
	// Stage. Their zero values admit everything. A recording is admitted
	// into STTStage before it is decoded, so that a request the stage would
	// refuse costs no decoding.
	STTStage Stage
	LLMStage Stage
	// Decodes bounds the recordings decoded at once (decoding is the step
	// whose memory grows with the upload); its zero value does not.
	Decodes Slots
}

func (p *Pipeline) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Infer runs req through the pipeline. Errors are *Error values whose Kind
// says how the API should answer.
func (p *Pipeline) Infer(ctx context.Context, req Request) (Result, error) {
	start := p.now()
	var res Result
	msgs := append([]Message(nil), req.Messages...)

	if req.Audio != nil {
		res.HasTranscript = true
		done, err := p.STTStage.Enter(ctx)
		if err != nil {
			return res, err
		}
		t0 := p.now()
		pcm, err := p.decode(ctx, req.Audio)
		res.Timings.Decode = p.now().Sub(t0)
		if err != nil {
			done(0)
			return res, err
		}
		res.AudioSeconds = float64(len(pcm)) / 16000
		if p.VAD != nil {
			sp, err := p.VAD.KeepSpeech(ctx, pcm)
			if err != nil {
				done(0)
				return res, wrapEngineErr(err, KindSTT, "voice activity detection failed")
			}
			if len(sp.PCM) == 0 {
				// No speech: Whisper never runs and nobody is answered.
				done(0)
				res.NoSpeech = true
				res.Timings.Total = p.now().Sub(start)
				return res, nil
			}
			pcm = sp.PCM
		}
		t1 := p.now()
		tr, err := p.STT.Transcribe(ctx, pcm, TranscribeOptions{Language: req.Profile.Language})
		res.Timings.STT = p.now().Sub(t1)
		// The stage learns the time of the work itself: with one transcription
		// at a time, the wait inside Transcribe is the other requests' work.
		done(tr.Mel + tr.Encoder + tr.Decoder)
		if err != nil {
			return res, wrapEngineErr(err, KindSTT, "speech-to-text failed")
		}
		res.Transcript = tr.Text
		res.TranscriptLanguage = tr.Language
		if strings.TrimSpace(tr.Text) == "" {
			// Whisper's no-speech rule silenced every window.
			res.Transcript = ""
			res.NoSpeech = true
			res.Timings.Total = p.now().Sub(start)
			return res, nil
		}
		for i := range msgs {
			if msgs[i].Audio {
				msgs[i].Content = tr.Text
			}
		}
	}

	res.PartnerTurn = PartnerTurn(msgs)
	var examples []Example
	if req.MemoryUser != "" && p.Memory != nil && res.PartnerTurn != "" {
		// After speech-to-text: the partner's turn is what they are matched on.
		examples, res.RecallErr = p.Memory.Recall(ctx, req.MemoryUser, res.PartnerTurn, MaxExamples)
	}

	profile := req.Profile
	if profile.Language == "" {
		// Reply in the language the partner spoke when the payload does not say.
		profile.Language = res.TranscriptLanguage
	}
	done, err := p.LLMStage.Enter(ctx)
	if err != nil {
		res.Timings.Total = p.now().Sub(start)
		return res, err
	}
	gen, err := p.LLM.Generate(ctx, GenerateRequest{
		SystemPrompt: req.SystemPrompt,
		Profile:      profile,
		Messages:     msgs,
		DialogID:     req.DialogID,
		Examples:     examples,
		N:            req.MaxCandidates,
		Temperature:  req.Temperature,
		Seed:         req.Seed,
	})
	done(gen.Prompt + gen.Generation)
	res.PromptTokens, res.CachedTokens, res.GenTokens = gen.PromptTokens, gen.CachedTokens, gen.GenTokens
	res.Examples, res.ExampleTokens = gen.Examples, gen.ExampleTokens
	res.Timings.Queue = gen.Queue
	res.Timings.Prompt = gen.Prompt
	res.Timings.Generation = gen.Generation
	res.Timings.Total = p.now().Sub(start)
	if err != nil {
		return res, wrapEngineErr(err, KindLLM, "reply generation failed")
	}
	res.Candidates = gen.Candidates
	// This is the one place a candidate's language is set: the language the
	// reply was asked in, that is the payload's language, else the language
	// the recording was transcribed in, else LanguageUnknown.
	lang := profile.Language
	if lang == "" {
		lang = LanguageUnknown
	}
	for i := range res.Candidates {
		res.Candidates[i].Language = lang
	}
	return res, nil
}

// decode runs Decode within the Decodes bound.
func (p *Pipeline) decode(ctx context.Context, data []byte) ([]float32, error) {
	release, err := p.Decodes.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	pcm, err := p.Decode(data, p.MaxAudio)
	if err != nil {
		return nil, classifyAudioErr(err)
	}
	return pcm, nil
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
