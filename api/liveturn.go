package api

// The live session's side of its turns: what engine.LiveSession, which
// runs the turns, needs of the API (liveSession is its engine.LiveHost,
// liveTurn each admitted turn's engine.LiveTurnHost): the admission, the
// requests built from the payload, the events and the answer sent on the
// socket, the record and the log entry.

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/store"
)

// Admit applies, to a turn that started, what /v1/infer applies to a
// request: the live switches (read afresh), the key's scope and rate
// limit, and its requests in progress; a refusal is sent as an error
// event. The CPU budget admits the committed pass itself.
func (sess *liveSession) Admit() (engine.LiveTurnHost, error) {
	t, err := sess.admitTurn()
	if err != nil {
		sess.sendError(err)
		return nil, err
	}
	return t, nil
}

func (sess *liveSession) admitTurn() (*liveTurn, error) {
	s := sess.s
	if err := s.liveRight(sess); err != nil {
		return nil, err
	}
	release, err := s.enterInflight(sess.key)
	if err != nil {
		return nil, err
	}
	if err := s.admit(sess.c, sess.key, budgetInfer); err != nil {
		release()
		return nil, err
	}
	t := &liveTurn{sess: sess, done: func(err *error) {
		s.refundIfShed(sess.key.Hash, err)
		release()
	}}
	// The turn's id names it from its start (its replies carry it).
	if _, err := t.inferenceID(); err != nil {
		t.done(&err)
		return nil, err
	}
	sess.turnCount++
	t.turn = sess.turnCount
	return t, nil
}

// Request builds the engine request of a pass over a turn from payload:
// the payload's dialog with the live turn last, the user's pseudonym, and
// the current prompt with its version, read once.
func (sess *liveSession) Request(payload []byte) (engine.Request, error) {
	s := sess.s
	req, audioIdx, err := parsePayload(withLiveTurn(payload), s.limits)
	if err != nil {
		return req, err
	}
	if req.UserID != "" {
		subject, tag, err := s.userSubject(sess.key.Hash, req.UserID)
		if err != nil {
			return req, err
		}
		req.UserTag = tag
		if req.MemoryUser != "" {
			req.MemoryUser = subject
		}
	}
	if audioIdx < 0 {
		req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSpeaker, Audio: true})
	}
	return req, s.withPrompt(&req)
}

// keyDialogs is the engine.Superseder of one key's live turns: the
// dialogs in flight that /v1/infer's requests share.
type keyDialogs struct {
	f   *dialogFlights
	key string
}

func (k keyDialogs) Order() uint64 { return k.f.order() }

func (k keyDialogs) Claim(dialogID string, order uint64, cancel context.CancelCauseFunc) func() {
	return k.f.startAt(k.key, dialogID, order, cancel)
}

// liveTurn is an admitted turn, from its start to its answer.
type liveTurn struct {
	sess *liveSession
	done func(*error) // frees the key's in-progress slot, refunds a shed turn
	// id is the turn's inference id, made when it is admitted
	// (inferenceID), and turn its number in the session (1 first).
	id   string
	turn int
	// rightGone: the committed pass found the key's right gone; the
	// session is closing and nothing more is sent.
	rightGone bool
	// sent are the replies sent (LiveCandidate); begun: the turn is
	// registered in recent (with its first reply), so that feedback on
	// it stops the rest; chosen: that happened.
	sent   sentReplies
	begun  bool
	chosen atomic.Bool
}

// inferenceID returns the turn's inference id, made on first use (when
// the turn is admitted).
func (t *liveTurn) inferenceID() (string, error) {
	if t.id == "" {
		id, err := newInferenceID(t.sess.s.rand)
		if err != nil {
			return "", err
		}
		t.id = id
	}
	return t.id, nil
}

// Request is the committed pass's request: the key's right is read again
// first.
func (t *liveTurn) Request(payload []byte) (engine.Request, error) {
	if err := t.sess.s.liveRight(t.sess); err != nil {
		t.rightGone = true
		return engine.Request{}, err
	}
	return t.sess.Request(payload)
}

// send sends one of the turn's events, naming the turn.
func (t *liveTurn) send(event string, data any) error {
	return t.sess.send(event, withTurn{turn: t.turn, data: data})
}

// Event sends what happened in the turn.
func (t *liveTurn) Event(ev engine.LiveEvent) {
	switch ev.Kind {
	case engine.LiveSpeechStart:
		_ = t.send("speech_start", struct{}{})
	case engine.LiveCaption:
		_ = t.send("caption", captionEvent{Text: ev.Text, AudioMS: ev.Audio.Milliseconds()})
	case engine.LiveEndOfTurn:
		_ = t.send("end_of_turn", endOfTurnEvent{AudioMS: ev.Audio.Milliseconds()})
	case engine.LiveTranscript:
		_ = t.send("transcript", newTranscriptEvent(ev.Heard))
	case engine.LiveCandidate:
		if !t.begun {
			// Before the first reply is out: feedback on it may come
			// at once, and stops the rest.
			t.begun = true
			stop := ev.Stop
			t.sess.s.recent.begin(t.id, t.sess.key.Hash, t.sess.s.now(), func(cause error) {
				t.chosen.Store(true)
				if stop != nil {
					stop(cause)
				}
			})
		}
		t.sent.add(ev.Candidate)
		_ = t.send("candidate", newCandidateEvent(t.id, ev.Candidate))
	}
}

// Drop frees a turn that ended before its end of turn.
func (t *liveTurn) Drop() {
	var err error = &Error{Code: CodeCanceled, Message: "the turn was dropped"}
	t.done(&err)
}

// End answers the turn: the candidates event, or the error event, then
// the log entry. A turn whose replies were partly sent when it failed (or
// was superseded) keeps them in its record; one whose reply was taken
// (feedback stopped the rest) is answered with the replies sent.
func (t *liveTurn) End(o engine.LiveOutcome) {
	sess, s := t.sess, t.sess.s
	err := o.Err
	var res engine.Result
	var out inferResponse
	var inf *store.InferenceInfo
	sent := t.sent.list()
	defer func() {
		t.done(&err)
		if t.begun {
			s.recent.answered(t.id, candidateTexts(sent))
		}
		sess.logTurn(o.Start, res, len(sent), inf, err)
		if t.begun {
			s.recent.markWritten(t.id)
		}
	}()
	if err != nil && o.Request != nil && t.chosen.Load() && engine.KindOf(err) == engine.KindCanceled && sess.ctx.Err() == nil {
		// The user took a reply shown early: the answer is the replies
		// sent.
		o.Result.Candidates, err = sent, nil
	}
	switch {
	case err != nil && t.rightGone:
		return // the key's end: the session is closing
	case err != nil && o.Request == nil:
		t.sendError(err) // the payload or the store
		return
	case err != nil:
		if o.Superseded {
			err = &Error{Code: CodeSuperseded, Message: "a newer turn for the same dialog_id replaced this one", Err: err}
		} else {
			err = s.inferError(sess.ctx, err)
		}
		if len(sent) > 0 {
			res = o.Result
			res.Candidates = sent
			_, inf = newAnswer(t.id, *o.Request, res, s.now().Sub(o.Start), "")
		}
		t.sendError(err)
		return
	}
	res = o.Result
	sent = res.Candidates
	s.metrics.observeInference(res)
	out, inf = newAnswer(t.id, *o.Request, res, s.now().Sub(o.Start), "")
	if !t.begun {
		s.recent.add(t.id, sess.key.Hash, s.now(), out.Response)
	}
	if werr := t.send("candidates", out); werr != nil {
		// The client went away with the answer computed: not a success.
		err = &Error{Code: CodeCanceled, Message: "the client closed the live session", Err: werr}
		if len(out.Response) == 0 || !t.begun {
			inf = nil
		}
	}
}

// sendError sends the turn's error event.
func (t *liveTurn) sendError(err error) {
	_ = t.send("error", t.sess.errorData(err))
}

// logTurn appends the turn's log entry, as inferLog does for /v1/infer:
// counts and times, never dialog text; a turn whose client went away is a
// warning (499), never a success.
func (sess *liveSession) logTurn(start time.Time, res engine.Result, candidates int, inf *store.InferenceInfo, err error) {
	s := sess.s
	elapsed := s.now().Sub(start)
	code, status := "ok", http.StatusOK
	level := store.LevelInfo
	msg := fmt.Sprintf("live turn ok: %d candidates in %d ms (audio %.1f s)", candidates, elapsed.Milliseconds(), res.AudioSeconds)
	if err != nil {
		ae := toAPIError(err)
		code, status = ae.Code, ae.Status()
		level, msg = store.LevelWarn, "live turn failed: "+code
		if status >= 500 {
			level = store.LevelError
		}
		// inf, when not nil, holds the replies sent before the failure.
	}
	entry := store.LogEntry{
		Timestamp: s.now(), Level: level, Message: msg,
		ResourceType: store.ResourceAPIKey, ResourceID: sess.key.Hash,
		StreamName: store.StreamInfer, Subject: sess.key.Hash,
		Status: status, LatencyMS: elapsed.Milliseconds(), Node: s.node, Inference: inf,
	}
	if err != nil {
		entry.ErrorCode = code
	}
	if code != CodeRateLimited || s.refusals.first(sess.key.Hash, s.now()) {
		if aerr := s.store.AppendLog(entry); aerr != nil {
			sess.log.Error("appending the live turn's log entry failed", "error", aerr.Error())
		}
	}
	if inf != nil {
		s.recent.markWritten(inf.ID)
	}
	s.metrics.inferences.WithLabelValues(code).Inc()
}
