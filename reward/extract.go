package reward

import (
	"regexp"
	"strings"
)

// maxResponseLen bounds the text searched for an answer (the end of a
// longer response is searched: answers come last).
const maxResponseLen = 1 << 16

var (
	reFinalAnswer = regexp.MustCompile(`(?i)final answer\s*(?:is|:)?\s*:?\s*(.+)`)
	reAnswerColon = regexp.MustCompile(`(?i)(?:^|\n)\s*\**answer\**\s*[:：]\s*(.+)`)
	reAnswerIs    = regexp.MustCompile(`(?i)\banswer\s+is\s*:?\s*(.+)`)
	reLastNumber  = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?|-?\.\d+`)
)

// Extract returns the final answer of a finished model response, as
// ExtractResponse does with truncated false.
func Extract(response string) (string, bool) { return ExtractResponse(response, false) }

// ExtractResponse returns the final answer of a model response; truncated
// says the response was cut off by the token limit.
//
// An explicit answer counts whether the response finished or not: the
// content of the last \boxed{…} or \fbox{…} (nested braces balanced), else
// what follows the last "final answer is" or "Answer:". In a truncated
// response the explicit answer must be complete — its closing brace or $,
// or for plain text a newline or the end of its sentence — since "Answer:
// 12" at the cut may have been going to be 125. An unclosed last \boxed{
// is never an answer.
//
// Without an explicit answer a truncated response has none: the last
// number of a cut-off text is whatever it was computing or listing when
// the limit came, and rewarding it would reward stray numbers. A finished
// response falls back to its final non-empty line, where an unboxed
// conclusion stands ("So there are 12 ways."): the last display math
// (\[…\], $$…$$) ending on that line, else what follows "the answer is" on
// it, else its last inline math with a digit or command in it when no
// number follows, else its last number. A number in the middle of the
// reasoning, lines before the end, is not an answer.
func ExtractResponse(response string, truncated bool) (string, bool) {
	if len(response) > maxResponseLen {
		response = response[len(response)-maxResponseLen:]
	}
	if ans, found, ok := lastBoxed(response, truncated); found {
		return ans, ok
	}
	for _, re := range []*regexp.Regexp{reFinalAnswer, reAnswerColon} {
		if ms := re.FindAllStringSubmatchIndex(response, -1); ms != nil {
			m := ms[len(ms)-1]
			// A newline after the match ends the answer; the end of the
			// text does only when the response finished.
			ans, complete := firstMath(response[m[2]:m[3]], m[3] < len(response) || !truncated)
			if ans != "" {
				if !complete {
					return "", false
				}
				return ans, true
			}
		}
	}
	if truncated {
		return "", false
	}
	return lastLineAnswer(response)
}

// lastLineAnswer is the fallback for a finished response without an
// explicit answer: what its final non-empty line states (ExtractResponse
// gives the order).
func lastLineAnswer(response string) (string, bool) {
	end := len(strings.TrimRight(response, " \t\r\n"))
	start := strings.LastIndexByte(response[:end], '\n') + 1
	line := response[start:end]
	if ans, at := lastDisplay(response); ans != "" && at >= start {
		return ans, true
	}
	if ms := reAnswerIs.FindAllStringSubmatch(line, -1); ms != nil {
		if ans, _ := firstMath(ms[len(ms)-1][1], true); ans != "" {
			return ans, true
		}
	}
	if inner, after := lastInlineMath(line); after >= 0 && strings.ContainsAny(inner, "0123456789\\") && !strings.ContainsAny(line[after:], "0123456789") {
		return inner, true
	}
	if ms := reLastNumber.FindAllString(line, -1); ms != nil {
		return strings.TrimRight(ms[len(ms)-1], ","), true
	}
	return "", false
}

// lastBoxed finds the last \boxed or \fbox. found reports that there was
// one; ok that its argument was complete. \boxed 5 (no braces) takes the
// following word, which in a truncated response must not run into the cut.
func lastBoxed(s string, truncated bool) (ans string, found, ok bool) {
	i := max(strings.LastIndex(s, `\boxed`), strings.LastIndex(s, `\fbox`))
	if i < 0 {
		return "", false, false
	}
	rest := s[i:]
	if strings.HasPrefix(rest, `\boxed`) {
		rest = rest[len(`\boxed`):]
	} else {
		rest = rest[len(`\fbox`):]
	}
	rest = strings.TrimLeft(rest, " ")
	if !strings.HasPrefix(rest, "{") {
		f := strings.Fields(rest)
		if len(f) == 0 || truncated && strings.HasSuffix(rest, f[0]) {
			return "", true, false
		}
		return strings.TrimRight(f[0], "$.,"), true, true
	}
	depth := 0
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\':
			j++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return rest[1:j], true, true
			}
		}
	}
	return "", true, false
}

// firstMath takes the answer out of the text after "final answer is": the
// first $…$ (or $$…$$, \[…\], \(…\)) if there is one, else the text up to
// the end of the line or sentence. complete reports that the answer's end
// is in s: its closing delimiter, a sentence end, or — when terminated
// says the line ended before the text did — the end of s.
func firstMath(s string, terminated bool) (ans string, complete bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "$") {
		if strings.HasPrefix(s, "$$") {
			if e := strings.Index(s[2:], "$$"); e >= 0 {
				return strings.TrimSpace(s[2 : 2+e]), true
			}
		}
		if end := closingDollar(s[1:]); end >= 0 {
			if inner := strings.TrimSpace(s[1 : 1+end]); inner != "" {
				return inner, true
			}
			return firstMath(s[2+end:], terminated) // "$ $x$ $": an empty pair first
		}
	}
	if strings.HasPrefix(s, `\[`) {
		if e := strings.Index(s, `\]`); e >= 0 {
			return strings.TrimSpace(s[2:e]), true
		}
	}
	if strings.HasPrefix(s, `\(`) {
		if e := strings.Index(s, `\)`); e >= 0 {
			return strings.TrimSpace(s[2:e]), true
		}
	}
	if i := strings.Index(s, "\n"); i >= 0 {
		s, terminated = s[:i], true
	}
	s = strings.TrimSpace(s)
	// End of sentence: a period followed by space or the end, not a decimal
	// point; a period at the cut of a truncated text may be one.
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i+1 == len(s) && terminated || i+1 < len(s) && s[i+1] == ' ') {
			return strings.TrimSpace(s[:i]), true
		}
	}
	return s, terminated
}

// lastDisplay returns the content of the last \[…\] or $$…$$ and where its
// closing delimiter starts (-1 if there is none).
func lastDisplay(s string) (string, int) {
	best, bestAt, end := "", -1, -1
	if i := strings.LastIndex(s, `\[`); i >= 0 {
		if e := strings.Index(s[i:], `\]`); e >= 0 {
			best, bestAt, end = s[i+2:i+e], i, i+e
		}
	}
	if e := strings.LastIndex(s, "$$"); e > 0 {
		if st := strings.LastIndex(s[:e], "$$"); st >= 0 && st > bestAt {
			best, end = s[st+2:e], e
		}
	}
	return strings.TrimSpace(best), end
}

// lastInlineMath returns the content of the last $…$ or \(…\) in a line
// and the index just past it (-1 if there is none); \$ is a dollar sign.
func lastInlineMath(line string) (string, int) {
	inner, end := "", -1
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && strings.HasPrefix(line[i:], `\(`):
			if e := strings.Index(line[i:], `\)`); e >= 0 {
				inner, end = line[i+2:i+e], i+e+2
				i = end - 1
			}
		case line[i] == '\\':
			i++
		case line[i] == '$':
			if e := closingDollar(line[i+1:]); e >= 0 {
				inner, end = line[i+1:i+1+e], i+2+e
				i = end - 1
			}
		}
	}
	return strings.TrimSpace(inner), end
}

// closingDollar finds the first $ in s that is not escaped as \$.
func closingDollar(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '$':
			return i
		}
	}
	return -1
}
