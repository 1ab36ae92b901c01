package engine

import (
	"context"
	"errors"
	"strings"
	"time"
)

// HeardAhead is the speech stage's result for a live turn computed ahead, at
// speculative priority (Pipeline.HearAhead), to be used by the committed
// turn (Request.Heard) when its audio did not change.
type HeardAhead struct {
	// Heard is the transcript, its language and warning, as the committed
	// turn reports them (Request.OnTranscript).
	Heard
	// NoSpeech: voice detection or Whisper found no speech.
	NoSpeech bool
	// AudioSeconds is the length of the audio heard.
	AudioSeconds float64
	// STT is how long the transcription took.
	STT time.Duration
	// Model names the Whisper model file that made the transcript (the
	// answer's SpeechModel, logged with it); empty when none ran.
	Model   string
	reserve int
}

// HearAhead runs the speech stage on a live turn's audio (req.PCM) as
// speculative work: voice detection and transcription take only cores that
// no other work waits for, the transcription is stopped (its context
// canceled) as soon as committed work or a committed transcription waits,
// and it gives its cores back between the encoder's steps to any work of
// a higher priority (Scheduler.BeginSpeculativeTranscription). With Overlap
// and a Prefiller it queues the prompt's evaluation up to the partner's
// turn too. The caller cancels ctx when the partner speaks again.
func (p *Pipeline) HearAhead(ctx context.Context, req Request) (*HeardAhead, error) {
	s := p.sched()
	h := &HeardAhead{AudioSeconds: float64(len(req.PCM)) / LiveRate}
	pcm := req.PCM
	if p.VAD != nil {
		sp, err := p.keepSpeech(ctx, pcm, req.VoiceProbs, PrioritySpeculative)
		if err != nil {
			return nil, wrapEngineErr(err, KindSTT, "voice activity detection failed")
		}
		if len(sp.PCM) == 0 {
			h.NoSpeech = true
			return h, nil
		}
		pcm = sp.PCM
	}
	h.reserve = TranscriptReserve(time.Duration(len(pcm)) * time.Second / LiveRate)
	msgs := append([]Message(nil), req.Messages...)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	threads, grow, end, err := s.BeginSpeculativeTranscription(ctx, cancel)
	if err != nil {
		return nil, wrapEngineErr(err, KindSTT, "speech-to-text failed")
	}
	// Its prompt work is speculative too: at PriorityAhead it would wait
	// for the cores this very transcription holds and cancel it.
	p.ahead(WithPriority(ctx, PrioritySpeculative), req, msgs, h.reserve)()
	t0 := p.now()
	tr, err := p.STT.Transcribe(ctx, pcm, TranscribeOptions{Language: req.Profile.Language, Threads: threads, Grow: grow})
	end()
	h.STT = p.now().Sub(t0)
	if err != nil {
		return nil, wrapEngineErr(err, KindSTT, "speech-to-text failed")
	}
	h.Heard, h.Model = tr.Heard(), tr.Model
	if strings.TrimSpace(tr.Text) == "" {
		h.Transcript, h.NoSpeech = "", true
	}
	return h, nil
}

// ReplyAhead generates a live turn's candidates from its transcript heard
// ahead (req.Heard, from HearAhead) as speculative work, before the turn
// is known to have ended (issue 35): the language model's cores are taken
// at PrioritySpeculative, and the generation is canceled as soon as
// committed or ahead work waits for cores or a committed request queues
// for the language model (Scheduler.BeginSpeculative). The caller cancels
// ctx when the partner speaks again, and uses the result for the committed
// turn only when its audio did not change. req.OnTranscript is not called:
// nothing of a turn not yet ended is shown. The request is not admitted
// into the work budget; it only ever uses cores nobody else wants.
func (p *Pipeline) ReplyAhead(ctx context.Context, req Request) (res Result, err error) {
	if req.Heard == nil || req.Heard.NoSpeech {
		return res, &Error{Kind: KindInternal, Message: "ReplyAhead needs a transcript heard ahead", Err: errors.New("no transcript")}
	}
	start := p.now()
	defer func() { res.Timings.Total = p.now().Sub(start) }()
	ctx, cancel := context.WithCancel(WithPriority(ctx, PrioritySpeculative))
	defer cancel()
	defer p.sched().BeginSpeculative(cancel)()
	res.HasTranscript = true
	msgs := append([]Message(nil), req.Messages...)
	req.OnTranscript = nil
	reserve := p.useHeard(req, msgs, &res)
	err = p.reply(ctx, req, msgs, reserve, &res)
	return res, err
}

// useHeard is the speech stage of a request whose transcript was computed
// ahead (Request.Heard): it fills res and msgs as hear does and returns the
// transcript's token reserve.
func (p *Pipeline) useHeard(req Request, msgs []Message, res *Result) int {
	h := req.Heard
	res.AudioSeconds = h.AudioSeconds
	res.Timings.STT = h.STT
	res.SpeechModel = h.Model
	if h.NoSpeech {
		res.NoSpeech = true
		return 0
	}
	res.Transcript, res.TranscriptLanguage, res.TranscriptWarning = h.Transcript, h.Language, h.Warning
	for i := range msgs {
		if msgs[i].Audio {
			msgs[i].Content = h.Transcript
		}
	}
	if req.OnTranscript != nil {
		req.OnTranscript(h.Heard)
	}
	return h.reserve
}

// hasAudio reports whether req carries audio to hear: an upload, a live
// turn's samples, or a transcript heard ahead.
func (r Request) hasAudio() bool { return r.Audio != nil || r.PCM != nil || r.Heard != nil }
