package pool

import (
	"regexp"
	"strings"
)

// Answer stripping: lessons and plans are about ideas, so the answers of the
// problems they come from are removed before another problem sees them.
// What counts as an answer:
//
//   - the content of every \boxed{…} and \fbox{…};
//   - a gold answer where it is stated as one: after "answer is", "answer:",
//     "result =" and the like, before ", the final answer" or "is the
//     answer", or as the last token of the text's final line ("… so there
//     are 10.");
//   - a gold answer standing elsewhere as a number or word of its own, but
//     only when the problem's own text does not contain it: "multiples of
//     10" says nothing the problem did not say, whatever the answer.
//
// Never stripped: list numbering ("3. Multiply …" at a line's start) and
// the gold inside a longer number or expression (142, 42.5, 1/3, x^3, -3).
// A real run showed why (issue notes in docs/lanpo.md): stripping every
// standalone "3" turned the third item of every list into "(answer
// omitted)." and a problem's own numbers into gaps.

// answerOmitted replaces a removed answer.
const answerOmitted = "(answer omitted)"

var (
	boxedCmd = regexp.MustCompile(`\\(boxed|fbox)\s*`)
	// statedBefore matches the end of the text before an answer stated as
	// one ($ and spaces between are allowed).
	statedBefore = regexp.MustCompile(`(?i)\b(answer|result)\s*(is|was|would be|will be|equals|=|:)?\s*[:=]?\s*\$*\s*$`)
	// statedAfter matches the start of the text after an answer stated as
	// one ("…, the final answer", "… is the answer").
	statedAfter = regexp.MustCompile(`(?i)^\$*\s*[,:]?\s*(which\s+)?(is\s+|was\s+)?(the\s+|our\s+)?(final\s+|correct\s+)?(answer|result)\b`)
	// listMarker matches a line's start up to a list number.
	listMarker = regexp.MustCompile(`(^|\n)[ \t]*[-*>#(\[]*[ \t]*$`)
)

// StripAnswers removes final answers from text written about problem (the
// problem's own text; "" when unknown, which makes every standalone
// occurrence of a gold answer count): boxed contents always, and each given
// answer (a gold answer) where the rules above call it stated.
func StripAnswers(text, problem string, answers ...string) string {
	text = stripBoxed(text)
	for _, a := range answers {
		a = strings.TrimSpace(strings.Trim(strings.TrimSpace(a), "$"))
		if a == "" {
			continue
		}
		inProblem := problem != "" && len(tokenSpans(problem, a)) > 0
		text = replaceStated(text, a, inProblem)
	}
	return text
}

// stripBoxed replaces each \boxed{…}/\fbox{…} (braces balanced) and its
// content; an unclosed one loses everything after it.
func stripBoxed(s string) string {
	var b strings.Builder
	for {
		loc := boxedCmd.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:loc[0]])
		b.WriteString(answerOmitted)
		rest := s[loc[1]:]
		if !strings.HasPrefix(rest, "{") {
			// \boxed 5: the following word.
			end := strings.IndexFunc(rest, func(r rune) bool { return r == ' ' || r == '\n' || r == '$' || r == '.' || r == ',' })
			if end < 0 {
				return b.String()
			}
			s = rest[end:]
			continue
		}
		depth, end := 0, -1
		for i := 0; i < len(rest) && end < 0; i++ {
			switch rest[i] {
			case '\\':
				i++
			case '{':
				depth++
			case '}':
				if depth--; depth == 0 {
					end = i + 1
				}
			}
		}
		if end < 0 {
			return b.String()
		}
		s = rest[end:]
	}
}

// replaceStated replaces the occurrences of tok in s that state it as an
// answer; with inProblem false, every occurrence of its own except list
// numbers.
func replaceStated(s, tok string, inProblem bool) string {
	spans := tokenSpans(s, tok)
	if len(spans) == 0 {
		return s
	}
	lastLine := strings.LastIndexByte(strings.TrimRight(s, " \t\n"), '\n') + 1
	var b strings.Builder
	prev := 0
	for _, sp := range spans {
		i, end := sp[0], sp[1]
		before := s[:i]
		list := listMarker.MatchString(before) && end < len(s) && (s[end] == '.' || s[end] == ')')
		stated := statedBefore.MatchString(before) || statedAfter.MatchString(s[end:]) ||
			i >= lastLine && !list && strings.TrimRight(s[end:], " \t\n.$!)") == ""
		if stated || !inProblem && !list {
			b.WriteString(s[prev:i])
			b.WriteString(answerOmitted)
			prev = end
		}
	}
	b.WriteString(s[prev:])
	return b.String()
}

// tokenSpans finds the occurrences of tok in s that stand on their own: not
// part of a longer number, word or expression.
func tokenSpans(s, tok string) [][2]int {
	var out [][2]int
	for from := 0; ; {
		j := strings.Index(s[from:], tok)
		if j < 0 {
			return out
		}
		i := from + j
		end := i + len(tok)
		if !extendsLeft(s, i, tok[0]) && !extendsRight(s, end, tok[len(tok)-1]) {
			out = append(out, [2]int{i, end})
		}
		from = end
	}
}

// extendsLeft reports whether the text before position i continues a token
// whose first character is edge: a letter or digit next to a letter or
// digit, a decimal point, digit group, fraction bar, power or index before
// a digit (3.42, 1,000, 1/3, x^3, a_3), or a minus sign that makes a
// negative number (-3, but not x - 3 or x-3).
func extendsLeft(s string, i int, edge byte) bool {
	if i == 0 {
		return false
	}
	c := s[i-1]
	switch {
	case isAlnum(c) && isAlnum(edge):
		return true
	case isDigit(edge) && (c == '/' || c == '^' || c == '_'):
		return true
	case isDigit(edge) && (c == '.' || c == ',') && i >= 2 && isDigit(s[i-2]):
		return true
	case isDigit(edge) && c == '-':
		// A binary minus follows an operand (with or without a space).
		j := i - 2
		if j >= 0 && s[j] == ' ' {
			j--
		}
		return j < 0 || !isOperand(s, j)
	}
	return false
}

// extendsRight is extendsLeft's mirror for the text from position end.
func extendsRight(s string, end int, edge byte) bool {
	if end >= len(s) {
		return false
	}
	c := s[end]
	switch {
	case isAlnum(c) && isAlnum(edge):
		return true
	case isDigit(edge) && (c == '/' || c == '^' || c == '_'):
		return true
	case isDigit(edge) && (c == '.' || c == ',') && end+1 < len(s) && isDigit(s[end+1]):
		return true
	}
	return false
}

// isOperand reports whether s[j] ends an operand: a digit, a closing
// bracket, or a one-letter variable (not the end of a word such as "and").
func isOperand(s string, j int) bool {
	c := s[j]
	switch {
	case isDigit(c) || c == ')' || c == '}':
		return true
	case isAlnum(c):
		return j == 0 || !isAlnum(s[j-1])
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// CutAtHeader ends a summary field where the model began another field on
// its own, in words the stop strings did not catch: a line that starts
// with another field's header word ("Principles worth reusing …",
// "**Pitfalls**"), whatever its case, or a sentence that does
// ("… done. Pitfalls: …"). headers are the prompts' field headers
// ("Principles:"); their trailing colon is not needed to match.
func CutAtHeader(field string, headers ...string) string {
	cut := len(field)
	for _, h := range headers {
		word := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(h), ":"))
		if word == "" {
			continue
		}
		q := regexp.QuoteMeta(word)
		re := regexp.MustCompile(`(?m)(^[ \t*#>\-]*(?i:` + q + `)\b|[.!?][ \t]+\**` + q + `\b)`)
		if loc := re.FindStringIndex(field); loc != nil && loc[0] < cut {
			cut = loc[0]
			if field[cut] == '.' || field[cut] == '!' || field[cut] == '?' {
				cut++ // keep the sentence's own full stop
			}
		}
	}
	return strings.TrimSpace(field[:cut])
}
