package main

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/rs/zerolog/log"
	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
)

// The JSONL filters (verify, tokenize, score, generate) write each batch's
// results as soon as it is done, and stop at a bad input line only after
// the output of every line before it is out; --skip-bad-lines writes an
// error record in the bad line's place instead and goes on.

var skipBadLinesFlag = &cli.BoolFlag{Name: "skip-bad-lines",
	Usage: "on a bad input line, write {\"error\": \"stdin line N: ..\"} in its place and go on (default: stop there, exit 1, with everything before it written)"}

// lineStream is where a filter writes: buffered, JSONL, flushed per batch.
type lineStream struct {
	out     *bufio.Writer
	enc     *json.Encoder
	skipBad bool
	skipped int
}

func newLineStream(w io.Writer, skipBad bool) *lineStream {
	out := bufio.NewWriter(w)
	return &lineStream{out: out, enc: jsonl.Encoder(out), skipBad: skipBad}
}

// bad is jsonl.Batched's handler for a bad line: nil (stop) unless
// --skip-bad-lines.
func (s *lineStream) bad() func(error) error {
	if !s.skipBad {
		return nil
	}
	return func(err error) error {
		s.skipped++
		log.Warn().Err(err).Msg("bad input line: an error record written in its place")
		if err := s.enc.Encode(struct {
			Error string `json:"error"`
		}{err.Error()}); err != nil {
			return err
		}
		return s.out.Flush()
	}
}

// done flushes what is left and reports skipped lines.
func (s *lineStream) done(err error) error {
	if ferr := s.out.Flush(); err == nil {
		err = ferr
	}
	if s.skipped > 0 {
		log.Warn().Int("lines", s.skipped).Msg("bad input lines skipped (--skip-bad-lines): their places hold {\"error\": ..}")
	}
	return err
}
