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
	reLastNumber  = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?|-?\.\d+`)
)

// Extract returns the final answer of a model response: the content of the
// last \boxed{…} or \fbox{…} (nested braces balanced); else what follows
// "final answer is" or "Answer:"; else the last display math (\[…\], $$…$$);
// else the last number. An unclosed last \boxed{ means the response was
// cut off: no answer.
func Extract(response string) (string, bool) {
	if len(response) > maxResponseLen {
		response = response[len(response)-maxResponseLen:]
	}
	if ans, found, ok := lastBoxed(response); found {
		return ans, ok
	}
	for _, re := range []*regexp.Regexp{reFinalAnswer, reAnswerColon} {
		if ms := re.FindAllStringSubmatch(response, -1); ms != nil {
			ans := firstMath(ms[len(ms)-1][1])
			if ans != "" {
				return ans, true
			}
		}
	}
	if ans := lastDisplay(response); ans != "" {
		return ans, true
	}
	if ms := reLastNumber.FindAllString(response, -1); ms != nil {
		return strings.TrimRight(ms[len(ms)-1], ","), true
	}
	return "", false
}

// lastBoxed finds the last \boxed or \fbox. found reports that there was
// one; ok that its argument was complete.
func lastBoxed(s string) (ans string, found, ok bool) {
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
		// \boxed 5: the following word.
		f := strings.Fields(rest)
		if len(f) == 0 {
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
// first $…$ if there is one, else the text up to the end of the sentence.
func firstMath(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "$") {
		if strings.HasPrefix(s, "$$") {
			if e := strings.Index(s[2:], "$$"); e >= 0 {
				return strings.TrimSpace(s[2 : 2+e])
			}
		}
		if end := closingDollar(s[1:]); end >= 0 {
			if inner := strings.TrimSpace(s[1 : 1+end]); inner != "" {
				return inner
			}
			return firstMath(s[2+end:]) // "$ $x$ $": an empty pair first
		}
	}
	if strings.HasPrefix(s, `\[`) {
		if e := strings.Index(s, `\]`); e >= 0 {
			return strings.TrimSpace(s[2:e])
		}
	}
	if strings.HasPrefix(s, `\(`) {
		if e := strings.Index(s, `\)`); e >= 0 {
			return strings.TrimSpace(s[2:e])
		}
	}
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	// End of sentence: a period followed by space or the end, not a decimal point.
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i+1 == len(s) || s[i+1] == ' ') {
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// lastDisplay returns the content of the last \[…\] or $$…$$.
func lastDisplay(s string) string {
	best, bestAt := "", -1
	if i := strings.LastIndex(s, `\[`); i >= 0 {
		if e := strings.Index(s[i:], `\]`); e >= 0 {
			best, bestAt = s[i+2:i+e], i
		}
	}
	if e := strings.LastIndex(s, "$$"); e > 0 {
		if st := strings.LastIndex(s[:e], "$$"); st >= 0 && st > bestAt {
			best = s[st+2 : e]
		}
	}
	return strings.TrimSpace(best)
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
