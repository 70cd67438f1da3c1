package reward

import (
	"math"
	"math/cmplx"
	"math/rand"
	"regexp"
	"sort"
	"strings"
)

// answer is a normalized final answer with its structure.
type answer struct {
	kind    string // "expr", "eq", "seq" (tuple/interval), "set", "list", "ineq", "matrix", "choice", "text"
	expr    *node
	percent bool // written with %: equals both v and v/100
	open    byte // seq brackets
	close   byte
	items   []*answer
	rows    [][]*answer
	text    string     // a text answer; the variable of an "ineq"
	ivals   []interval // "ineq": the subset of the real line it describes
}

var (
	reChoice = regexp.MustCompile(`^\(?([A-E])\)?$`)
	reWords  = regexp.MustCompile(`^[A-Za-z][A-Za-z\s'-]*$`)
	reMatrix = regexp.MustCompile(`^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{([pbvBV]?matrix|array)\}$`)
)

// parseAnswer reads a normalized answer. Unparseable expressions become
// text answers, compared as strings.
func parseAnswer(s string, b *budget) *answer {
	s = strings.TrimSpace(s)
	if m := reChoice.FindStringSubmatch(s); m != nil {
		return &answer{kind: "choice", text: m[1]}
	}
	if strings.HasPrefix(s, `\text{`) && strings.HasSuffix(s, "}") {
		return &answer{kind: "text", text: s[len(`\text{`) : len(s)-1]}
	}
	if m := reMatrix.FindStringSubmatch(s); m != nil {
		return parseMatrix(m[2], b)
	}
	if s == `\emptyset` {
		return &answer{kind: "set"}
	}
	if inner, ok := braceSet(s); ok {
		if strings.TrimSpace(inner) == "" {
			return &answer{kind: "set"}
		}
		if a, ok := parseSetBuilder(inner, b); ok {
			return a
		}
		return &answer{kind: "set", items: flatten(parseItems(splitTop(inner, ","), b))}
	}
	if parts := splitTopCmd(s, `\cup`); len(parts) > 1 {
		return union(parseItems(parts, b))
	}
	if seq := parseSeq(s, b); seq != nil {
		return seq
	}
	if parts, and := splitConjunction(s); len(parts) > 1 {
		items := parseItems(parts, b)
		if a, ok := joinRelations(items, and, b); ok {
			return a
		}
		return &answer{kind: "list", items: flatten(items)}
	}
	if parts := splitTop(s, ","); len(parts) > 1 {
		return &answer{kind: "list", items: flatten(parseItems(parts, b))}
	}
	if a, ok := parseInequality(s, b); ok {
		return a
	}
	if parts := splitTop(s, "="); len(parts) == 2 {
		return &answer{kind: "eq", items: parseItems(parts, b)}
	}
	if i := topIndex(s, `\pm`); i >= 0 {
		plus := s[:i] + "+" + s[i+3:]
		minus := s[:i] + "-" + s[i+3:]
		if strings.TrimSpace(s[:i]) == "" {
			plus, minus = s[i+3:], "-("+s[i+3:]+")"
		}
		return &answer{kind: "list", items: parseItems([]string{plus, minus}, b)}
	}
	pct := false
	if t := strings.TrimSuffix(strings.TrimSuffix(s, `\%`), "%"); t != s {
		s, pct = strings.TrimSpace(t), true
	}
	if n, err := parseExpr(s); err == nil {
		return &answer{kind: "expr", expr: n, percent: pct}
	}
	return &answer{kind: "text", text: normText(s)}
}

// parseSeq reads (a, b, …) or [a, b, …], or a half-open interval: one
// bracket pair around the whole answer with commas inside.
func parseSeq(s string, b *budget) *answer {
	if len(s) < 2 || !strings.ContainsRune("([", rune(s[0])) || !strings.ContainsRune(")]", rune(s[len(s)-1])) {
		return nil
	}
	inner := s[1 : len(s)-1]
	if !balanced(inner) {
		return nil // (a)(b), (1,2) \cup (3,4): not one sequence
	}
	parts := splitTop(inner, ",")
	if len(parts) < 2 {
		return nil
	}
	return &answer{kind: "seq", open: s[0], close: s[len(s)-1], items: parseItems(parts, b)}
}

func parseItems(parts []string, b *budget) []*answer {
	out := make([]*answer, len(parts))
	for i, p := range parts {
		out[i] = parseAnswer(p, b)
	}
	return out
}

func parseMatrix(body string, b *budget) *answer {
	a := &answer{kind: "matrix"}
	for _, row := range strings.Split(body, `\\`) {
		if strings.TrimSpace(row) == "" {
			continue
		}
		a.rows = append(a.rows, parseItems(strings.Split(row, "&"), b))
	}
	return a
}

func normText(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	return strings.Trim(s, " .")
}

// splitTop splits s at sep where no bracket is open; an escaped character
// (\{ \} \,) is skipped.
func splitTop(s, sep string) []string { return splitOutside(s, sep, true) }

// splitTopCmd splits at a LaTeX command (\cup) where no bracket is open.
func splitTopCmd(s, cmd string) []string { return splitOutside(s, cmd, false) }

func splitOutside(s, sep string, skipEscapes bool) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case '\\':
			if skipEscapes {
				i++
				continue
			}
		}
		if depth == 0 && strings.HasPrefix(s[i:], sep) {
			parts = append(parts, s[start:i])
			start = i + len(sep)
			i += len(sep) - 1
		}
	}
	return append(parts, s[start:])
}

func topIndex(s, sub string) int {
	parts := splitTopCmd(s, sub)
	if len(parts) < 2 {
		return -1
	}
	return len(parts[0])
}

func balanced(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}

// equivalent compares a gold answer with a predicted one.
func equivalent(gold, pred *answer, b *budget) bool {
	if b.steps <= 0 {
		return false
	}
	switch {
	case gold.kind == "ineq" || pred.kind == "ineq":
		return sameRealSet(gold, pred, b)
	// x = 5 states 5, and so does 16 \times (-8) = -128 state -128: the
	// right side of an equation whose left side is a variable or a
	// number. (2+3 = 6 states 6, as math-verify reads it too.)
	case gold.kind == "eq" && pred.kind != "eq":
		return statesValue(gold, b) && equivalent(gold.items[1], pred, b)
	case pred.kind == "eq" && gold.kind != "eq":
		return statesValue(pred, b) && equivalent(gold, pred.items[1], b)
	case gold.kind == "choice" || pred.kind == "choice":
		return gold.kind == pred.kind && gold.text == pred.text
	}
	if gold.kind != pred.kind {
		// A bare list and a set or sequence of the same items.
		unordered := func(a *answer) bool { return a.kind == "list" || a.kind == "set" }
		if unordered(gold) && (unordered(pred) || pred.kind == "seq" && !isInterval(pred, b)) ||
			unordered(pred) && gold.kind == "seq" && !isInterval(gold, b) {
			return sameMultiset(gold.items, pred.items, b)
		}
		if gold.kind == "text" || pred.kind == "text" {
			return gold.raw() != "" && gold.raw() == pred.raw()
		}
		return false
	}
	switch gold.kind {
	case "expr":
		return exprEqual(gold, pred, b)
	case "text":
		return gold.text == pred.text
	case "eq":
		l1, r1, l2, r2 := gold.items[0], gold.items[1], pred.items[0], pred.items[1]
		if equivalent(l1, l2, b) && equivalent(r1, r2, b) || equivalent(l1, r2, b) && equivalent(r1, l2, b) {
			return true
		}
		return false
	case "seq":
		if len(gold.items) != len(pred.items) {
			return false
		}
		// Brackets matter for intervals: two real end points in increasing
		// order, or any half-open pair. Otherwise (points, vectors) ( ) and
		// [ ] are the same, as math-verify has it.
		if (isInterval(gold, b) || isInterval(pred, b)) && (gold.open != pred.open || gold.close != pred.close) {
			return false
		}
		for i := range gold.items {
			if !equivalent(gold.items[i], pred.items[i], b) {
				return false
			}
		}
		return true
	case "set", "list":
		return sameMultiset(gold.items, pred.items, b)
	case "matrix":
		if len(gold.rows) != len(pred.rows) {
			return false
		}
		for i := range gold.rows {
			if len(gold.rows[i]) != len(pred.rows[i]) {
				return false
			}
			for j := range gold.rows[i] {
				if !equivalent(gold.rows[i][j], pred.rows[i][j], b) {
					return false
				}
			}
		}
		return true
	}
	return false
}

func (a *answer) raw() string { return a.text }

// isInterval reports whether a sequence reads as an interval: mixed
// brackets, or two real end points in increasing order (±∞ included).
func isInterval(a *answer, b *budget) bool {
	if a.kind != "seq" || len(a.items) != 2 {
		return false
	}
	if (a.open == '(') != (a.close == ')') {
		return true
	}
	lo, ok1 := realValue(a.items[0], b)
	hi, ok2 := realValue(a.items[1], b)
	return ok1 && ok2 && lo < hi
}

// realValue evaluates a variable-free expression answer to a real number.
func realValue(a *answer, b *budget) (float64, bool) {
	if a.kind != "expr" {
		return 0, false
	}
	v, err := numeric(a.expr, nil, b)
	if err != nil || imag(v) != 0 || math.IsNaN(real(v)) {
		return 0, false
	}
	return real(v), true
}

func isVar(a *answer) bool {
	return a.kind == "expr" && a.expr.op == "var"
}

// isConstant reports whether a is an expression without variables that
// evaluates (16 \times (-8), 2\pi, \sqrt{2}).
func isConstant(a *answer, b *budget) bool {
	if a.kind != "expr" {
		return false
	}
	set := map[string]bool{}
	vars(a.expr, set)
	if len(set) > 0 {
		return false
	}
	_, err := numeric(a.expr, nil, b)
	return err == nil
}

// statesValue reports whether an equation states the value on its right:
// its left side is a variable or a constant expression.
func statesValue(eq *answer, b *budget) bool {
	return isVar(eq.items[0]) || isConstant(eq.items[0], b)
}

// sameMultiset matches every item of one list with a distinct equivalent
// item of the other.
func sameMultiset(x, y []*answer, b *budget) bool {
	if len(x) != len(y) {
		return false
	}
	used := make([]bool, len(y))
	for _, a := range x {
		found := false
		for j, c := range y {
			if !used[j] && equivalent(a, c, b) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Relative tolerance for numeric comparison.
const relTol = 1e-6

// exprEqual compares two expressions: exactly when both are rational
// numbers, else numerically at fixed random points of their variables.
func exprEqual(g, p *answer, b *budget) bool {
	gv := []*node{g.expr}
	if g.percent {
		gv = append(gv, scale(g.expr, 100))
	}
	pv := []*node{p.expr}
	if p.percent {
		pv = append(pv, scale(p.expr, 100))
	}
	for _, x := range gv {
		for _, y := range pv {
			if nodesEqual(x, y, b) {
				return true
			}
		}
	}
	return false
}

func scale(n *node, by int64) *node {
	return &node{op: "*", kids: []*node{n, {op: "^", kids: []*node{numInt(by), numInt(-1)}}}}
}

func nodesEqual(x, y *node, b *budget) bool {
	ex, errx := exact(x, b)
	ey, erry := exact(y, b)
	if errx == nil && erry == nil {
		if ex.Cmp(ey) == 0 {
			return true
		}
		if ex.IsInt() && ey.IsInt() {
			return false // two different integers, however large
		}
		fx, _ := ex.Float64()
		fy, _ := ey.Float64()
		return sameAt6(complex(fx, 0), complex(fy, 0))
	}
	if errx == errBudget || erry == errBudget {
		return false
	}
	set0 := map[string]bool{}
	vars(x, set0)
	vars(y, set0)
	if len(set0) == 0 {
		// Numbers given by constants and functions (2\pi, \sqrt{2}):
		// equal when they agree to 6 decimal places, as math-verify
		// compares (\pi = 3.141593, \pi ≠ 3.14159).
		vx, err1 := numeric(x, nil, b)
		vy, err2 := numeric(y, nil, b)
		return err1 == nil && err2 == nil && sameAt6(vx, vy)
	}
	set := map[string]bool{}
	vars(x, set)
	vars(y, set)
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names) // the same values for the same variables every run
	rng := rand.New(rand.NewSource(20251022))
	// Points spread over [1.5, 10.5]: wide enough that floor(m/2) and
	// floor(m/3) differ somewhere. Step functions need many more points,
	// far apart (floor(sqrt(n-1)) and floor(sqrt(n-2)) differ only just
	// after squares).
	trials, span := 6, 9.0
	if hasFn(x, "floor", "ceil") || hasFn(y, "floor", "ceil") {
		trials, span = 64, 400
	}
	for trial := 0; trial < trials; trial++ {
		env := map[string]complex128{}
		for _, name := range names {
			env[name] = complex(1.5+span*rng.Float64(), 0)
		}
		vx, err := numeric(x, env, b)
		if err != nil {
			return false
		}
		vy, err := numeric(y, env, b)
		if err != nil {
			return false
		}
		if !closeEnough(vx, vy) {
			return false
		}
	}
	return true
}

// sameAt6 compares numbers rounded to 6 decimal places (real and
// imaginary parts); infinities by sign.
func sameAt6(a, c complex128) bool {
	if cmplx.IsNaN(a) || cmplx.IsNaN(c) {
		return false
	}
	if cmplx.IsInf(a) || cmplx.IsInf(c) {
		return closeEnough(a, c)
	}
	r := func(x float64) float64 { return math.RoundToEven(x*1e6) / 1e6 }
	return r(real(a)) == r(real(c)) && r(imag(a)) == r(imag(c))
}

func closeEnough(a, c complex128) bool {
	if cmplx.IsNaN(a) || cmplx.IsNaN(c) {
		return false
	}
	if cmplx.IsInf(a) || cmplx.IsInf(c) {
		return cmplx.IsInf(a) && cmplx.IsInf(c) && math.Signbit(real(a)) == math.Signbit(real(c)) && real(a) != 0
	}
	scale := math.Max(1, math.Max(cmplx.Abs(a), cmplx.Abs(c)))
	return cmplx.Abs(a-c) <= relTol*scale
}

func hasFn(n *node, names ...string) bool {
	if n.op == "fn" {
		for _, name := range names {
			if n.name == name {
				return true
			}
		}
	}
	for _, k := range n.kids {
		if hasFn(k, names...) {
			return true
		}
	}
	return false
}
