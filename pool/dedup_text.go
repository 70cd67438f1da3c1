package pool

import (
	"strings"
	"unicode"
)

// Reading a problem text for Similarity (dedup.go): diagrams become what
// they show, sentences about the answer's format go, LaTeX spelling is
// normalized, and the rest splits into formulas and prose.

// segment is a run of text in one mode: a formula (tokens in order) or
// prose (content words, and numbers).
type segment struct {
	formula bool
	diagram bool     // a diagram's label: where it is drawn is not text order
	math    []string // a formula's tokens ("" separates items), or prose's numbers
	words   []string // prose's content words
	prose   []string // prose's numbers and words in text order; "" ends a sentence, "?" starts a question
}

// tokenize splits a problem text into formula and prose segments.
func tokenize(text string) []segment {
	s := strings.Join(strings.Fields(diagramText(text)), " ")
	t := tokenizer{rs: []rune(latex.Replace(dropAnswerFormat(s))), textDepth: -1}
	t.run()
	for k := range t.out {
		t.out[k].math = joinFractions(t.out[k].math)
	}
	return t.out
}

type tokenizer struct {
	rs        []rune
	out       []segment
	cur       segment
	prose     []string // the current prose run's words, filtered when it ends
	inMath    bool
	depth     int // of braces
	textDepth int // brace depth at which a \text{...} inside a formula ends; -1: none
}

// math says whether the reader is in a formula (and not in its \text).
func (t *tokenizer) math() bool { return t.inMath && t.textDepth < 0 }

// flush ends the current segment; the next is a formula or prose.
func (t *tokenizer) flush(formula bool) {
	for _, w := range contentWords(t.prose) {
		switch {
		case w == "" || w == "?": // a sentence ends; a question starts
		case isNumberLike(w):
			t.cur.math = append(t.cur.math, w)
		default:
			t.cur.words = append(t.cur.words, w)
		}
		t.cur.prose = append(t.cur.prose, w)
	}
	t.prose = t.prose[:0]
	if len(t.cur.math)+len(t.cur.words)+len(t.cur.prose) > 0 {
		t.out = append(t.out, t.cur)
	}
	t.cur = segment{formula: formula}
}

// toggle enters or leaves a formula; leaving one that ends with a full
// stop ("$x.$") ends a sentence.
func (t *tokenizer) toggle(in bool, at int) {
	t.inMath = in
	t.flush(in)
	if !in && endsSentence(t.rs[:at]) {
		t.prose = append(t.prose, "")
	}
}

func (t *tokenizer) run() {
	rs := t.rs
	next := func(k int) rune { // the rune at k, or 0 past the end
		if k < len(rs) {
			return rs[k]
		}
		return 0
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case r == '$':
			t.toggle(!t.inMath, i)
			if next(i+1) == '$' {
				i++
			}
		case r == '\\' && (next(i+1) == '[' || next(i+1) == '('):
			t.toggle(true, i)
			i++
		case r == '\\' && (next(i+1) == ']' || next(i+1) == ')'):
			t.toggle(false, i)
			i++
		case r == '\\' && next(i+1) == '\\': // a formula's line break
			t.cur.math = append(t.cur.math, "")
			i++
		case r == '\\' && unicode.IsLetter(next(i+1)):
			i = t.command(i)
			continue
		case r == '{':
			t.depth++
		case r == '}':
			t.depth--
			if t.textDepth >= 0 && t.depth == t.textDepth {
				t.textDepth = -1
			}
		case unicode.IsDigit(r):
			j := number(rs, i)
			if n := strings.ReplaceAll(string(rs[i:j]), ",", ""); t.math() {
				t.cur.math = append(t.cur.math, n)
			} else {
				t.prose = append(t.prose, n)
			}
			i = j
			continue
		case unicode.IsLetter(r):
			i = t.word(i)
			continue
		case !t.math() && (r == '.' || r == '?' || r == '!') && (next(i+1) == ' ' || next(i+1) == 0):
			t.prose = append(t.prose, "")
		case t.math() && (r == ',' || r == ';' || r == '&'):
			t.cur.math = append(t.cur.math, "") // separates items: no pair across it
		case t.math() && strings.ContainsRune("+-=<>^_/|!()[]", r):
			t.cur.math = append(t.cur.math, string(r))
		}
		i++
	}
	t.flush(false)
}

// word reads the letters at rs[i] and returns where reading goes on.
func (t *tokenizer) word(i int) int {
	rs := t.rs
	j := i
	for j < len(rs) && unicode.IsLetter(rs[j]) {
		j++
	}
	w := string(rs[i:j])
	switch {
	case t.math():
		t.cur.math = append(t.cur.math, strings.ToLower(w))
		return j
	case j-i > 1 && strings.ToUpper(w) == w:
		// A word in capitals is data ("the letters of ELLIPSE"): it weighs
		// like a number.
		t.prose = append(t.prose, "'"+strings.ToLower(w))
		return j
	}
	w = strings.ToLower(w)
	if w == "non" && j+1 < len(rs) && rs[j] == '-' && unicode.IsLetter(rs[j+1]) {
		k := j + 1 // "non-zero" is "nonzero"
		for k < len(rs) && unicode.IsLetter(rs[k]) {
			k++
		}
		w, j = w+strings.ToLower(string(rs[j+1:k])), k
	}
	if n, ok := numberWords[w]; ok {
		w = n
	}
	t.prose = append(t.prose, w)
	return j
}

// command reads the LaTeX command at rs[i] ("\frac") and returns where
// reading goes on.
func (t *tokenizer) command(i int) int {
	rs := t.rs
	j := i + 1
	for j < len(rs) && unicode.IsLetter(rs[j]) {
		j++
	}
	skipSpaces := func(k int) int {
		for k < len(rs) && rs[k] == ' ' {
			k++
		}
		return k
	}
	switch cmd := string(rs[i+1 : j]); cmd {
	case "text", "mbox", "textbf", "textit", "emph":
		if t.inMath {
			t.textDepth = t.depth // its argument is prose
		}
	case diagramMark[1:]:
		t.cur.diagram = true
	case "times", "cdot", "circ", "cal", "mathcal":
		// Multiplication is often implicit, degrees often a word; a font
		// is not content.
	case "overline":
		// \overline{AB} is the segment AB, \overline{3} a repeating digit.
		k := j
		for k < len(rs) && (rs[k] == ' ' || rs[k] == '{') {
			k++
		}
		if k < len(rs) && unicode.IsDigit(rs[k]) {
			t.cur.math = append(t.cur.math, `\overline`)
		}
	case "frac":
		t.cur.math = append(t.cur.math, `\frac`)
		k := skipSpaces(j)
		if k == len(rs) || !unicode.IsDigit(rs[k]) {
			break
		}
		// \frac12, \frac 18: one-digit arguments without braces.
		for n := 0; n < 2 && k < len(rs) && unicode.IsDigit(rs[k]); n++ {
			t.cur.math = append(t.cur.math, string(rs[k]))
			k = skipSpaces(k + 1)
		}
		return k
	default:
		t.cur.math = append(t.cur.math, `\`+strings.ToLower(cmd))
	}
	return j
}

// endsSentence: a formula closing after rs ends a sentence ("$x.$").
func endsSentence(rs []rune) bool {
	k := len(rs) - 1
	for k >= 0 && rs[k] == ' ' {
		k--
	}
	return k >= 0 && (rs[k] == '.' || rs[k] == '?' || rs[k] == '!')
}

// number returns the end of the number starting at i: digits, thousands
// groups ("24,000"), and one decimal point followed by digits.
func number(rs []rune, i int) int {
	j := i
	for j < len(rs) && unicode.IsDigit(rs[j]) {
		j++
	}
	group := func(j int) bool { // ",ddd" and no fourth digit
		return j+3 < len(rs) && rs[j] == ',' && isDigits(rs[j+1:j+4]) && (j+4 == len(rs) || !unicode.IsDigit(rs[j+4]))
	}
	if j-i <= 3 {
		for group(j) {
			j += 4
		}
	}
	if j+1 < len(rs) && rs[j] == '.' && unicode.IsDigit(rs[j+1]) {
		j++
		for j < len(rs) && unicode.IsDigit(rs[j]) {
			j++
		}
	}
	return j
}

func isDigits(rs []rune) bool {
	for _, r := range rs {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// joinFractions writes a fraction of two single numbers or names one way:
// \frac{1}{2}, \frac12 and 1/2 all become "1/2", and "(1/b)" is "1/b".
func joinFractions(ts []string) []string {
	atom := func(t string) bool {
		return t != "" && (unicode.IsDigit(rune(t[0])) || unicode.IsLetter(rune(t[0]))) && !strings.Contains(t, "/")
	}
	var out []string
	for i := 0; i < len(ts); i++ {
		switch {
		case ts[i] == `\frac` && i+2 < len(ts) && atom(ts[i+1]) && atom(ts[i+2]):
			out = append(out, ts[i+1]+"/"+ts[i+2])
			i += 2
		case atom(ts[i]) && i+2 < len(ts) && ts[i+1] == "/" && atom(ts[i+2]):
			out = append(out, ts[i]+"/"+ts[i+2])
			i += 2
		default:
			out = append(out, ts[i])
		}
		if n := len(out); n >= 3 && out[n-3] == "(" && strings.Contains(out[n-2], "/") && out[n-1] == ")" {
			out = append(out[:n-3], out[n-2])
		}
	}
	return out
}

// contentWords filters a run of prose words: the phrasing of questions and
// function words go, synonyms become one word, negations weigh like
// numbers, the rest is stemmed. Numbers and sentence ends ("") pass.
func contentWords(ws []string) []string {
	var out []string
	for i, w := range ws {
		switch {
		case w == "" || isNumberLike(w):
			out = append(out, w)
		case w == "real" && i+1 < len(ws) && (ws[i+1] == "number" || ws[i+1] == "numbers"):
			// "let x be a real number": the default, not content.
		case questionCues[w]:
			out = append(out, "?")
		case phrasingWords[w]:
		case negations[w]:
			// A negation turns the problem around: "balls not distinguishable".
			out = append(out, "'"+w)
		case synonyms[w] != "":
			out = append(out, synonyms[w])
		default:
			out = append(out, stem(w))
		}
	}
	return out
}

// diagramMark starts a formula made of a diagram's content.
const diagramMark = `\asylabel`

// diagramText replaces each Asymptote diagram by what it shows, each piece
// as a formula: the strings it draws (labels) and the functions it plots
// (the expressions after "return"). Coordinates are left out: a twin
// redraws the figure, but labels the same points and plots the same graph.
func diagramText(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "[asy]")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+len("[asy]"):]
		end := strings.Index(rest, "[/asy]")
		if end < 0 {
			end = len(rest)
		}
		code := rest[:end]
		for k, q := range strings.Split(code, `"`) {
			if k%2 == 1 { // inside quotes
				b.WriteString(" $" + diagramMark + " " + strings.ReplaceAll(q, "$", " ") + "$ ")
			}
		}
		for _, r := range strings.Split(code, "return")[1:] {
			if k := strings.IndexByte(r, ';'); k >= 0 {
				b.WriteString(" $" + diagramMark + " " + strings.ReplaceAll(r[:k], "$", " ") + "$ ")
			}
		}
		s = rest[min(len(rest), end+len("[/asy]")):]
	}
}

// dropAnswerFormat removes the sentences that say how to write the answer
// ("Express your answer as a common fraction.", "Enter all the solutions,
// separated by commas."): they change the answer's form, not the problem.
// A text that is one such sentence stays as it is. Whitespace in s is
// single spaces.
func dropAnswerFormat(s string) string {
	for from := 0; ; {
		lower := strings.ToLower(s[from:])
		i := -1
		for _, cue := range answerFormatCues {
			if j := strings.Index(lower, cue); j >= 0 && (i < 0 || j < i) {
				i = j
			}
		}
		if i < 0 {
			return s
		}
		start, end := sentence(s, from+i)
		if start == 0 && end == len(s) {
			return s
		}
		s = s[:start] + " " + s[end:]
		from = start
	}
}

// answerFormatCues mark a sentence about the answer's form; the last is a
// list of quoted choices: Enter "odd", "even", or "neither".
var answerFormatCues = []string{"your answer", "separated by commas", `enter "`}

// sentence returns the bounds of the sentence around byte i: from the last
// sentence start at or before i to the next one after it. A sentence starts
// after ".", "?" or "!" and a space (outside a formula, or as a formula's
// last character: "... is $x.$ Then", "\[x = 0.\]Enter") and after "("; one
// that starts after "(" ends at ")".
func sentence(s string, i int) (start, end int) {
	stop := func(c byte) bool { return c == '.' || c == '?' || c == '!' }
	spaceAfter := func(k int) bool { return k == len(s) || s[k] == ' ' }
	inParens := func() bool { return start > 0 && s[start-1] == '(' }
	inMath := false
	for k := 0; k < len(s); {
		next, boundary := k+1, -1
		switch {
		case s[k] == '$':
			if strings.HasPrefix(s[k:], "$$") {
				next = k + 2
			}
			inMath = !inMath
			if !inMath && k > 0 && stop(s[k-1]) && spaceAfter(next) {
				boundary = next
			}
		case strings.HasPrefix(s[k:], `\[`) || strings.HasPrefix(s[k:], `\(`):
			inMath, next = true, k+2
		case strings.HasPrefix(s[k:], `\]`) || strings.HasPrefix(s[k:], `\)`):
			inMath, next = false, k+2
			if j := strings.TrimRight(s[:k], " "); j != "" && stop(j[len(j)-1]) {
				boundary = next
			}
		case inMath:
		case s[k] == '(':
			boundary = next
		case s[k] == ')' && inParens() && k >= i:
			return start, next
		case stop(s[k]) && spaceAfter(next):
			boundary = next
		}
		switch {
		case boundary < 0:
		case boundary <= i:
			start = boundary
		case !inParens():
			return start, boundary
		}
		k = next
	}
	return start, len(s)
}

// latex normalizes spelling that does not change a formula. Longer names
// come first: the replacer tries them in this order.
var latex = strings.NewReplacer(
	`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\left`, ` `, `\right`, ` `, `\bigl`, ` `, `\bigr`, ` `, `\Bigl`, ` `, `\Bigr`, ` `,
	`\big`, ` `, `\Big`, ` `, `\displaystyle`, ` `, `\!`, ` `, `\,`, ` `, `\;`, ` `, `\:`, ` `, `\ `, ` `, `\qquad`, ` `, `\quad`, ` `,
	`{,}`, `,`, `\leqslant`, `\le `, `\geqslant`, `\ge `, `\leq`, `\le `, `\geq`, `\ge `, `\neq`, `\ne `, `\lt`, `<`, `\gt`, `>`,
	`\ldots`, `\dots `, `\cdots`, `\dots `, `\dotsb`, `\dots `, `\dotsm`, `\dots `, `\dotsc`, `\dots `,
	`^\circ`, ` `, `^{\circ}`, ` `, `^{\circ }`, ` `, `\%`, `%`, `\$`, ` `,
	`\mathbf`, ` `, `\boldsymbol`, ` `, `\mathrm`, ` `, `\mathit`, ` `, `\mathop`, ` `, `\operatorname`, ` `,
	`\begin{align*}`, `\[`, `\end{align*}`, `\]`, `\begin{align}`, `\[`, `\end{align}`, `\]`,
	`\begin{eqnarray*}`, `\[`, `\end{eqnarray*}`, `\]`,
)

// stem strips common English endings, so "measures", "measuring" and
// "measure" agree.
func stem(w string) string {
	switch {
	case len(w) > 5 && strings.HasSuffix(w, "ing"):
		w = w[:len(w)-3]
	case len(w) > 4 && strings.HasSuffix(w, "ed"):
		w = w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss"):
		w = w[:len(w)-1]
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

// negations turn a condition around.
var negations = map[string]bool{"not": true, "no": true, "neither": true, "nor": true, "never": true, "without": true,
	"except": true, "cannot": true, "none": true}

// synonyms are words a rewording swaps freely.
var synonyms = map[string]string{"greatest": "max", "largest": "max", "biggest": "max", "maximum": "max", "maximal": "max",
	"smallest": "min", "least": "min", "minimum": "min", "minimal": "min"}

var numberWords = map[string]string{"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
	"seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14",
	"fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30",
	"forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100",
	"thousand": "1000"}

// questionCues start the question a problem asks; the first formula after
// the last of them is the asked quantity ("Find $c$.", "what is $x+y$?").
var questionCues = map[string]bool{"what": true, "which": true, "how": true, "find": true, "compute": true, "calculate": true,
	"determine": true, "evaluate": true, "express": true, "simplify": true, "solve": true}

// phrasingWords carry no content of their own: function words and the
// phrasing of a question ("what is the value of", "find", "how many"),
// which a rewording changes freely.
var phrasingWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the of to in on at by for with from as into onto over across about through along around
		and or but if then than that this these those there here it its itself they them their he she his her him we us our
		you your i me my is are was were be been being am do does did done has have had having can could will would shall should
		may might must what which who whom whose when where why how whether find compute calculate determine evaluate give write
		enter express show list state value values number numbers equal equals such so also let suppose given assume consider
		all any each every some many much answer result resulting form simplest possible ordered
		satisfy satisfies satisfying satisfied reals coordinate coordinates simplify solve`) {
		m[w] = true
	}
	return m
}()
