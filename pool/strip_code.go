package pool

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Code stripping: in a code run (reward.kind: code) a lesson or plan that
// quotes another problem's program hands the solver code to copy, so
// lessons, plans and stored summaries lose their code as they lose their
// answers. What counts as code:
//
//   - every fenced block, from a run of three or more backticks to the next
//     such run (an unclosed one: to the end of the text), fence lines and
//     info string included;
//   - inline code in single backticks longer than maxInlineCode characters
//     (`sorted()` or `dp[i]` stays: short inline code is how prose names
//     things);
//   - an unfenced block: a line that starts, after its indentation, with
//     one of Python's statement forms below, with the lines after it that
//     are indented deeper (its body; blank lines count only when a deeper
//     line follows them).
//
// The statement forms are matched case-sensitively (Python's keywords are
// lower case, so "Return the …" and "Import …" beginning a sentence are
// prose) and must look like code, not like a sentence that starts with the
// same word:
//
//	def name(                      a function definition
//	class Name: / class Name(…):   ending the line (a comment may follow)
//	import a.b [as c][, d …]       the whole line
//	from a.b import x[, y …] / * / (   (or from . / from .a)
//	@name / @name(…)               a decorator, the whole line
//	>>> …                          a doctest; its block runs to the next
//	                               blank line (the expected output sits at
//	                               the prompt's own indentation)
//	return / return EXPR           EXPR: not ending like a sentence
//	                               (. ! ? , ; :), not starting with a prose
//	                               word (the, this, early, …), and either
//	                               one token (x, None, len(xs), n-1) or
//	                               holding a code mark: a bracket, = < >,
//	                               a spaced operator (a + b), x*2, if…else,
//	                               for…in, lambda
//
// "return" inside a sentence is never a start (only a line's first word
// is), nor are other statements (for, if, x = …) on their own: they are
// removed only as part of a block. The rule prefers keeping prose to
// catching every fragment: a stray line of code in a lesson hands over
// little, a lost sentence loses the lesson. Each removed block, fenced or
// not, becomes codeOmitted; blocks separated only by blank lines become
// one.

// codeOmitted replaces removed code.
const codeOmitted = "(code omitted)"

// maxInlineCode is the longest inline code span (characters between the
// backticks) that stays.
const maxInlineCode = 60

var (
	fenceRun   = regexp.MustCompile("`{3,}")
	inlineCode = regexp.MustCompile("`[^`\n]+`")
	// codeStarts are the statement forms that begin an unfenced block
	// (matched against a line without its indentation).
	codeStarts = []*regexp.Regexp{
		regexp.MustCompile(`^def\s+[A-Za-z_]\w*\s*\(`),
		regexp.MustCompile(`^class\s+[A-Za-z_]\w*\s*(\([^)]*\))?\s*:\s*(#.*)?$`),
		regexp.MustCompile(`^import\s+` + dotted + `(\s+as\s+` + ident + `)?(\s*,\s*` + dotted + `(\s+as\s+` + ident + `)?)*\s*(#.*)?$`),
		regexp.MustCompile(`^from\s+(\.+|\.*` + dotted + `)\s+import\s+(\*|\(|` + ident + `(\s+as\s+` + ident + `)?(\s*,\s*` + ident + `(\s+as\s+` + ident + `)?)*\s*(#.*)?$)`),
		regexp.MustCompile(`^@` + dotted + `(\(.*\))?\s*$`),
	}
	doctestStart = regexp.MustCompile(`^>>>(\s|$)`)
	returnStart  = regexp.MustCompile(`^return\b(.*)$`)
	// codeMark is something a returned expression has and a sentence
	// rarely does.
	codeMark = regexp.MustCompile(`[()\[\]{}<>=]|\s[-+*/%]\s|\w[-+*/%]\d|\*\*|//|\bif\b.+\belse\b|\bfor\b.+\bin\b|\blambda\b`)
	// proseAfterReturn are words that, following "return" at a line's
	// start, make it a sentence ("return the largest …", "return early").
	proseAfterReturn = map[string]bool{"the": true, "an": true, "this": true, "that": true, "these": true, "those": true,
		"its": true, "their": true, "it": true, "them": true, "each": true, "every": true, "all": true, "both": true,
		"either": true, "early": true, "immediately": true, "only": true, "whether": true, "when": true, "what": true,
		"how": true, "instead": true, "from": true, "to": true}
)

const (
	ident  = `[A-Za-z_]\w*`
	dotted = `[A-Za-z_][\w.]*`
)

// StripCode removes another problem's code from text (a lesson, plan or
// summary), by the rules above; prose, short inline code and the words
// around removed code stay.
func StripCode(text string) string {
	text = stripFences(text)
	text = inlineCode.ReplaceAllStringFunc(text, func(span string) string {
		if utf8.RuneCountInString(span)-2 > maxInlineCode {
			return codeOmitted
		}
		return span
	})
	return stripCodeLines(text)
}

// StripForeign is what text about one problem goes through before another
// problem's prompt may show it (lessons, plans, stored summaries): in a
// code run StripCode, then always StripAnswers. With code false it is
// StripAnswers exactly.
func StripForeign(text, problem string, code bool, answers ...string) string {
	if code {
		text = StripCode(text)
	}
	return StripAnswers(text, problem, answers...)
}

// stripFences replaces each fenced block with codeOmitted.
func stripFences(s string) string {
	var b strings.Builder
	for {
		open := fenceRun.FindStringIndex(s)
		if open == nil {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:open[0]])
		b.WriteString(codeOmitted)
		rest := s[open[1]:]
		end := fenceRun.FindStringIndex(rest)
		if end == nil {
			return b.String()
		}
		s = rest[end[1]:]
	}
}

// stripCodeLines replaces each unfenced block with codeOmitted at its first
// line's indentation. A line that is codeOmitted alone (a fenced block
// already replaced) counts as a block, so neighbours merge with it.
func stripCodeLines(s string) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	for i := 0; i < len(lines); {
		indent, doctest, ok := codeStart(lines[i])
		if !ok {
			out = append(out, lines[i])
			i++
			continue
		}
		end := i + 1 // a placeholder has no body
		if strings.TrimSpace(lines[i]) != codeOmitted {
			end = blockEnd(lines, i, indent, doctest)
		}
		// Only blank lines since the previous placeholder: one block.
		j := len(out)
		for j > 0 && strings.TrimSpace(out[j-1]) == "" {
			j--
		}
		if j > 0 && strings.TrimSpace(out[j-1]) == codeOmitted {
			out = out[:j]
		} else {
			line := lines[i]
			out = append(out, line[:len(line)-len(strings.TrimLeft(line, " \t"))]+codeOmitted)
		}
		i = end
	}
	return strings.Join(out, "\n")
}

// codeStart reports whether line begins a block, its indentation in
// columns, and whether it is a doctest prompt.
func codeStart(line string) (indent int, doctest, ok bool) {
	body := strings.TrimLeft(line, " \t")
	indent = columns(line[:len(line)-len(body)])
	body = strings.TrimRight(body, " \t\r")
	switch {
	case body == codeOmitted:
		return indent, false, true
	case doctestStart.MatchString(body):
		return indent, true, true
	}
	if m := returnStart.FindStringSubmatch(body); m != nil {
		return indent, false, returnsCode(m[1])
	}
	for _, re := range codeStarts {
		if re.MatchString(body) {
			return indent, false, true
		}
	}
	return indent, false, false
}

// returnsCode reports whether what follows "return" at a line's start is
// an expression rather than the rest of a sentence.
func returnsCode(rest string) bool {
	if k := strings.IndexByte(rest, '#'); k >= 0 {
		rest = rest[:k]
	}
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return true
	}
	if strings.ContainsAny(rest[len(rest)-1:], ".!?,;:") {
		return false
	}
	fields := strings.Fields(rest)
	if proseAfterReturn[fields[0]] {
		return false
	}
	return len(fields) == 1 || codeMark.MatchString(rest)
}

// blockEnd is the index of the first line after the block that starts at
// line i: the following lines indented deeper than indent (for a doctest:
// the following non-blank lines at indent or deeper, up to a blank line),
// without the blank lines that end it.
func blockEnd(lines []string, i, indent int, doctest bool) int {
	end := i + 1
	for k := i + 1; k < len(lines); k++ {
		line := lines[k]
		if strings.TrimSpace(line) == "" {
			if doctest {
				break
			}
			continue // inside only if a deeper line follows
		}
		d := columns(line[:len(line)-len(strings.TrimLeft(line, " \t"))])
		if d > indent || doctest && d >= indent {
			end = k + 1
			continue
		}
		break
	}
	return end
}

// columns is the width of indentation, a tab counting as four spaces.
func columns(ws string) int {
	n := 0
	for _, c := range ws {
		if c == '\t' {
			n += 4
		} else {
			n++
		}
	}
	return n
}
