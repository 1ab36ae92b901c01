package bolt

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/replyd/replyd/store"
)

// inferRow is the value of one infer_index entry: what Stats, feedback and
// the outcome export need of an infer log entry, in a compact binary form
// so that a window of a month decodes in milliseconds. Its key is the log
// entry's key ("nanos ‖ seq"), so the entry's time is in the key.
//
// Layout (format 2): 0x02, then subject, key hash, uvarint status, error
// code, uvarint latency ms, inference id, prompt version, uvarint count and
// uvarint lengths of the candidates, a flags byte (rowRemembered,
// rowHasOutcome) and, with an outcome: kind, uvarint rank, uvarint spoken
// chars, uvarint keystrokes, varint time to choice, uvarint first and last
// report nanos; with rowHasActions the outcome's steering part; with
// rowHasModel, last, the language model's file name. Strings are a uvarint
// length and the bytes. Format 1
// (schema 1 files) was the subject's bytes alone; decodeRow reads both.
type inferRow struct {
	subject        string
	keyHash        string
	status         int
	errorCode      string
	latencyMS      int64
	inferenceID    string
	promptVersion  string
	candidateChars []int
	remembered     bool
	outcome        *store.Outcome
	model          string // the language model that answered ("" unknown)
}

const (
	rowFormat     = 0x02
	rowRemembered = 1 << 0
	rowHasOutcome = 1 << 1
	// rowHasActions: the outcome is followed by its steering mode and the
	// user's reported keys and selections (steering; absent in older rows).
	rowHasActions = 1 << 2
	// rowHasModel: the row ends with the language model's file name
	// (absent in older rows).
	rowHasModel = 1 << 3
)

var errBadRow = errors.New("store: malformed infer index entry")

func (r inferRow) encode() []byte {
	b := make([]byte, 0, 64+len(r.subject)+len(r.keyHash)+len(r.inferenceID))
	putStr := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, rowFormat)
	putStr(r.subject)
	putStr(r.keyHash)
	b = binary.AppendUvarint(b, uint64(max(r.status, 0)))
	putStr(r.errorCode)
	b = binary.AppendUvarint(b, uint64(max(r.latencyMS, 0)))
	putStr(r.inferenceID)
	putStr(r.promptVersion)
	b = binary.AppendUvarint(b, uint64(len(r.candidateChars)))
	for _, n := range r.candidateChars {
		b = binary.AppendUvarint(b, uint64(max(n, 0)))
	}
	var flags byte
	if r.remembered {
		flags |= rowRemembered
	}
	if r.outcome != nil {
		flags |= rowHasOutcome
		if r.outcome.ActionsReported || r.outcome.SteerMode != "" {
			flags |= rowHasActions
		}
	}
	if r.model != "" {
		flags |= rowHasModel
	}
	b = append(b, flags)
	if o := r.outcome; o != nil {
		putStr(o.Kind)
		b = binary.AppendUvarint(b, uint64(max(o.Rank, 0)))
		b = binary.AppendUvarint(b, uint64(max(o.SpokenChars, 0)))
		b = binary.AppendUvarint(b, uint64(max(o.KeystrokesSaved, 0)))
		b = binary.AppendVarint(b, o.TimeToChoiceMS)
		b = binary.AppendUvarint(b, nanos(o.FirstAt))
		b = binary.AppendUvarint(b, nanos(o.At))
		if flags&rowHasActions != 0 {
			putStr(o.SteerMode)
			var reported uint64
			if o.ActionsReported {
				reported = 1
			}
			b = binary.AppendUvarint(b, reported)
			b = binary.AppendUvarint(b, uint64(max(o.KeysPressed, 0)))
			b = binary.AppendUvarint(b, uint64(max(o.Selections, 0)))
		}
	}
	if flags&rowHasModel != 0 {
		putStr(r.model)
	}
	return b
}

// rowReader reads the fields of an encoded row; the first error sticks.
// With intern set, strings are shared through it: the statistics read many
// rows with few distinct subjects, keys and versions, and a lookup with a
// []byte key allocates nothing.
type rowReader struct {
	b      []byte
	err    error
	intern map[string]string
}

func (r *rowReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadRow
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads a zig-zag signed varint, as binary.AppendVarint writes it.
func (r *rowReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// bytes returns the next string's bytes, aliasing the input.
func (r *rowReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errBadRow
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *rowReader) str() string { return internString(r.intern, r.bytes()) }

// internString returns b as a string, shared through m when m is not nil.
func internString(m map[string]string, b []byte) string {
	if m == nil || len(b) == 0 {
		return string(b)
	}
	if s, ok := m[string(b)]; ok {
		return s
	}
	s := string(b)
	m[s] = s
	return s
}

func (r *rowReader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errBadRow
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// decodeRow decodes an infer_index value; v is only read during the call.
func decodeRow(v []byte) (inferRow, error) {
	var row inferRow
	if len(v) == 0 || v[0] != rowFormat {
		// Format 1: the subject alone (hex, so never 0x02).
		row.subject = string(v)
		return row, nil
	}
	r := rowReader{b: v[1:]}
	row.subject = r.str()
	row.keyHash = r.str()
	row.status = int(r.uvarint())
	row.errorCode = r.str()
	row.latencyMS = int64(r.uvarint())
	row.inferenceID = r.str()
	row.promptVersion = r.str()
	if n := r.uvarint(); n > 0 && r.err == nil {
		if n > uint64(len(r.b)) {
			return row, errBadRow
		}
		row.candidateChars = make([]int, n)
		for i := range row.candidateChars {
			row.candidateChars[i] = int(r.uvarint())
		}
	}
	flags := r.byte1()
	row.remembered = flags&rowRemembered != 0
	if flags&rowHasOutcome != 0 {
		o := &store.Outcome{}
		r.outcome(o, flags)
		row.outcome = o
	}
	if flags&rowHasModel != 0 {
		row.model = r.str()
	}
	return row, r.err
}

// outcome reads the outcome part of a row into o.
func (r *rowReader) outcome(o *store.Outcome, flags byte) {
	o.Kind = r.str()
	o.Rank = int(r.uvarint())
	o.SpokenChars = int(r.uvarint())
	o.KeystrokesSaved = int(r.uvarint())
	o.TimeToChoiceMS = r.varint()
	o.FirstAt = fromNanos(r.uvarint())
	o.At = fromNanos(r.uvarint())
	o.SteerMode, o.ActionsReported, o.KeysPressed, o.Selections = "", false, 0, 0
	if flags&rowHasActions != 0 {
		o.SteerMode = r.str()
		o.ActionsReported = r.uvarint() == 1
		o.KeysPressed = int(r.uvarint())
		o.Selections = int(r.uvarint())
	}
}

// decodeStatsRow decodes what the statistics need of an infer_index value
// into a StatsRow, whose Outcome, if any, is *o. Strings are shared through
// intern, and nothing else is allocated: a month of rows takes
// milliseconds.
func decodeStatsRow(v []byte, intern map[string]string, o *store.Outcome) (store.StatsRow, error) {
	if len(v) == 0 || v[0] != rowFormat {
		return store.StatsRow{Subject: internString(intern, v)}, nil
	}
	r := rowReader{b: v[1:], intern: intern}
	var s store.StatsRow
	s.Subject = r.str()
	s.KeyHash = r.str()
	s.Status = int(r.uvarint())
	s.ErrorCode = r.str()
	s.LatencyMS = int64(r.uvarint())
	s.Answered = len(r.bytes()) > 0
	s.PromptVersion = r.str()
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint()
	}
	flags := r.byte1()
	if flags&rowHasOutcome != 0 {
		r.outcome(o, flags)
		s.Outcome = o
	}
	if flags&rowHasModel != 0 {
		s.Model = r.str()
	}
	return s, r.err
}

// fromNanos is the inverse of nanos (0 is the zero Time), in UTC.
func fromNanos(n uint64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n)).UTC()
}

// rowOf builds the index row of an infer log entry.
func rowOf(e store.LogEntry) inferRow {
	row := inferRow{
		subject:   e.Subject,
		keyHash:   e.ResourceID,
		status:    e.Status,
		errorCode: e.ErrorCode,
		latencyMS: e.LatencyMS,
	}
	if inf := e.Inference; inf != nil {
		row.inferenceID = inf.ID
		row.promptVersion = inf.PromptVersion
		row.candidateChars = inf.CandidateChars
		row.remembered = inf.Remember != nil && e.Subject != ""
		row.model = inf.Model
	}
	return row
}
