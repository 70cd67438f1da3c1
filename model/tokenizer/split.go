package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split pattern of Qwen2, Qwen2.5 and Qwen3 tokenizer.json files, and the
// Llama-3 one, which differs only in taking up to three digits per piece.
const (
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitter cuts text into the pieces Hugging Face's Split pre-tokenizer makes
// with one of the patterns above and behavior "Isolated". Go's regexp has no
// look-ahead, so the pattern is executed by hand: at each position the
// alternatives are tried in order, each with the match Oniguruma's
// backtracking would find. Character classes follow Oniguruma's Unicode
// semantics: \p{L} and \p{N} are the general categories, \s is the
// White_Space property (Go's unicode.IsSpace is exactly that set).
type splitter struct {
	maxDigits int // 1 for Qwen, 3 for Llama-3
}

type class uint8

const (
	clsOther   class = iota // not a letter, number or white space
	clsLetter               // \p{L}
	clsNumber               // \p{N}
	clsSpace                // \s other than CR and LF
	clsNewline              // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classify(r)
	}
	return t
}()

func classify(r rune) class {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

// at returns the rune at byte offset i, its width and its class; at the end of
// s it returns width 0.
func at(s string, i int) (rune, int, class) {
	if i >= len(s) {
		return 0, 0, clsOther
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, w, classify(r)
}

func isSpace(c class) bool { return c == clsSpace || c == clsNewline }

// split calls emit with the end offset of each piece of s, in order; pieces
// cover s exactly.
func (sp splitter) split(s string, emit func(end int)) {
	for i := 0; i < len(s); {
		end := sp.match(s, i)
		emit(end)
		i = end
	}
}

// match returns the end of the piece that starts at byte offset i.
func (sp splitter) match(s string, i int) int {
	r, w, c := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return letters(s, i+w)
	}
	_, w2, c2 := at(s, i+w)
	if c != clsNewline && c != clsNumber && c2 == clsLetter {
		return letters(s, i+w+w2)
	}
	// \p{N} (Llama-3: \p{N}{1,3})
	if c == clsNumber {
		j := i + w
		for k := 1; k < sp.maxDigits; k++ {
			_, wk, ck := at(s, j)
			if ck != clsNumber {
				break
			}
			j += wk
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r == ' ' && c2 == clsOther {
		j = i + 1
	}
	if _, wj, cj := at(s, j); cj == clsOther && wj > 0 {
		j += wj
		for {
			_, wk, ck := at(s, j)
			if ck != clsOther || wk == 0 {
				break
			}
			j += wk
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if isSpace(c) {
		// The white-space run [i, e), the start of its last rune, and the
		// end of its last CR or LF.
		e, last, nl := i, i, -1
		for {
			_, wk, ck := at(s, e)
			if wk == 0 || !isSpace(ck) {
				break
			}
			if ck == clsNewline {
				nl = e + wk
			}
			last = e
			e += wk
		}
		// \s*[\r\n]+ : greedy \s* gives back runes until [\r\n]+ can match,
		// which ends the match just after the run's last CR or LF.
		if nl >= 0 {
			return nl
		}
		// \s+(?!\S) : the run, minus its last rune when text follows it.
		if e == len(s) {
			return e
		}
		if last > i {
			return last
		}
		// \s+
		return e
	}
	// Unreachable: every rune is in one of the classes above. Keep the
	// pieces covering the text anyway.
	return i + w
}

// letters returns the end of the run of letters starting at j.
func letters(s string, j int) int {
	for {
		_, w, c := at(s, j)
		if c != clsLetter || w == 0 {
			return j
		}
		j += w
	}
}

// contraction returns the byte length of the suffix matched by
// (?i:s|t|re|ve|m|ll|d) at the start of s, or 0. Case-insensitive matching in
// Oniguruma uses Unicode case folding, under which ſ (U+017F) is an s.
func contraction(s string) int {
	fold := func(i int) (rune, int) {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch r {
		case 'S', 'T', 'R', 'E', 'V', 'M', 'L', 'D':
			r += 'a' - 'A'
		case 'ſ':
			r = 's'
		}
		return r, w
	}
	if len(s) == 0 {
		return 0
	}
	r1, w1 := fold(0)
	switch r1 {
	case 's', 't', 'm', 'd':
		return w1
	case 'r', 'v', 'l':
		if w1 >= len(s) {
			return 0
		}
		r2, w2 := fold(w1)
		if (r1 == 'r' && r2 == 'e') || (r1 == 'v' && r2 == 'e') || (r1 == 'l' && r2 == 'l') {
			return w1 + w2
		}
	}
	return 0
}
