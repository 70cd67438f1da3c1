package tokenizer

import (
	smtok "github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/normalizer"
	"github.com/sugarme/tokenizer/pretokenizer"
)

// splitPattern is the split pattern as a sugarme normalizer.Pattern: every
// piece is reported as a match, so the pieces cover the text.
type splitPattern struct{ sp splitter }

func (p splitPattern) FindMatches(inside string) []normalizer.OffsetsMatch {
	var out []normalizer.OffsetsMatch
	start := 0
	p.sp.split(inside, func(end int) {
		out = append(out, normalizer.OffsetsMatch{Offsets: []int{start, end}, Match: true})
		start = end
	})
	if len(out) == 0 {
		out = append(out, normalizer.OffsetsMatch{Offsets: []int{0, 0}, Match: false})
	}
	return out
}

// SplitPreTokenizer returns the tokenizer's split pre-tokenizer for
// sugarme/tokenizer's pipeline (tokenizer.Tokenizer.WithPreTokenizer, inside a
// pretokenizer.Sequence before a ByteLevel step): the piece that sugarme's
// own Split cannot build because Go's regexp rejects the pattern.
func (t *Tokenizer) SplitPreTokenizer() smtok.PreTokenizer {
	return pretokenizer.NewSplit(splitPattern{t.split}, normalizer.IsolatedBehavior, false)
}
