package reward

import (
	"math"
	"sort"
	"strings"
)

// Subsets of the real line written in different notations: intervals and
// their unions ((2,\infty), (-\infty,0)\cup\{1\}), inequalities in one
// variable (x > 2, -1 \le x < 3, x \ne 0), joined by "or" and "and", and
// set-builder sets of them (\{x \mid x > 2\}). Each is read into a sorted
// union of disjoint intervals, and two answers are equal when those are.

// interval is one piece of a subset of the real line. lo and hi are the end
// points as answers (compared with equivalent, exactly where they are
// rational); loV and hiV their values, for ordering.
type interval struct {
	lo, hi             *answer
	loV, hiV           float64
	loClosed, hiClosed bool
}

func infinity(sign int) *answer {
	n := &node{op: "inf"}
	if sign < 0 {
		n = &node{op: "neg", kids: []*node{n}}
	}
	return &answer{kind: "expr", expr: n}
}

// relation is an inequality sign; less reports its direction (< ≤ are
// less, > ≥ are not), strict whether equality is excluded.
type relation struct {
	less, strict, ne bool
}

var relations = map[string]relation{
	"<": {less: true, strict: true}, ">": {strict: true}, "<=": {less: true}, ">=": {},
	"≤": {less: true}, "≥": {},
	`\lt`: {less: true, strict: true}, `\gt`: {strict: true},
	`\le`: {less: true}, `\leq`: {less: true}, `\leqslant`: {less: true}, `\leqq`: {less: true},
	`\ge`: {}, `\geq`: {}, `\geqslant`: {}, `\geqq`: {},
	`\ne`: {ne: true}, `\neq`: {ne: true}, "≠": {ne: true},
}

// splitRelations splits s at inequality signs outside brackets. It returns
// nil when s has none.
func splitRelations(s string) (parts []string, rels []relation) {
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		sign := ""
		switch {
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case c == '\\':
			j := i + 1
			for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
				j++
			}
			if j == i+1 { // \{ \} \,: an escaped character
				i++
				continue
			}
			if _, ok := relations[s[i:j]]; ok {
				sign = s[i:j]
			} else {
				i = j - 1
				continue
			}
		case c == '<' || c == '>':
			sign = s[i : i+1]
			if i+1 < len(s) && s[i+1] == '=' {
				sign = s[i : i+2]
			}
		case strings.HasPrefix(s[i:], "≤"), strings.HasPrefix(s[i:], "≥"), strings.HasPrefix(s[i:], "≠"):
			sign = s[i : i+len("≤")]
		}
		if sign == "" || depth != 0 {
			continue
		}
		parts = append(parts, s[start:i])
		rels = append(rels, relations[sign])
		start = i + len(sign)
		i = start - 1
	}
	if rels == nil {
		return nil, nil
	}
	return append(parts, s[start:]), rels
}

// parseInequality reads "x > a", "a \le x", "a < x \le b" or "x \ne a"
// (one variable, real constant bounds) as an "ineq" answer. Anything else
// with an inequality sign in it (2x > 4, x < y, a < x > b) is a text
// answer. hasRelation is false when s has no inequality sign.
func parseInequality(s string, b *budget) (a *answer, hasRelation bool) {
	parts, rels := splitRelations(s)
	if rels == nil {
		return nil, false
	}
	fail := &answer{kind: "text", text: normText(s)}
	if len(parts) > 3 {
		return fail, true
	}
	v := -1 // the operand that is the variable
	vals := make([]*answer, len(parts))
	nums := make([]float64, len(parts))
	for i, p := range parts {
		n, err := parseExpr(strings.TrimSpace(p))
		if err != nil {
			return fail, true
		}
		if n.op == "var" {
			if v >= 0 {
				return fail, true
			}
			v = i
			vals[i] = &answer{kind: "expr", expr: n}
			continue
		}
		vals[i] = &answer{kind: "expr", expr: n}
		x, ok := realValue(vals[i], b)
		if !ok {
			return fail, true
		}
		nums[i] = x
	}
	if v < 0 {
		return fail, true
	}
	name := vals[v].expr.name
	if len(rels) == 1 && rels[0].ne {
		c := 1 - v
		if math.IsInf(nums[c], 0) {
			return fail, true
		}
		return &answer{kind: "ineq", text: name, ivals: []interval{
			{lo: infinity(-1), loV: math.Inf(-1), hi: vals[c], hiV: nums[c]},
			{lo: vals[c], loV: nums[c], hi: infinity(1), hiV: math.Inf(1)},
		}}, true
	}
	for _, r := range rels {
		if r.ne || r.less != rels[0].less {
			return fail, true // a < x > b, x \ne a < b
		}
	}
	// Read the chain left to right as lower ≤ x ≤ upper; a chain of > is
	// the same read right to left.
	iv := interval{lo: infinity(-1), loV: math.Inf(-1), hi: infinity(1), hiV: math.Inf(1)}
	for i, r := range rels {
		left, right := i, i+1
		if !r.less {
			left, right = right, left
		}
		switch v {
		case right: // bound < x
			iv.lo, iv.loV, iv.loClosed = vals[left], nums[left], !r.strict
		case left: // x < bound
			iv.hi, iv.hiV, iv.hiClosed = vals[right], nums[right], !r.strict
		default:
			return fail, true // 1 < 2 < x: a relation between constants
		}
	}
	return &answer{kind: "ineq", text: name, ivals: normIntervals([]interval{iv})}, true
}

// toIntervals reads an answer as a subset of the real line: an inequality,
// an interval, a set of real numbers or a union of those, and x = a (the
// point a). name is the variable an inequality or equation names ("" for
// an interval or set).
func toIntervals(a *answer, b *budget) (ivs []interval, name string, ok bool) {
	switch a.kind {
	case "ineq":
		return a.ivals, a.text, true
	case "seq":
		if !isInterval(a, b) {
			return nil, "", false
		}
		lo, _ := realValue(a.items[0], b)
		hi, _ := realValue(a.items[1], b)
		return []interval{{lo: a.items[0], hi: a.items[1], loV: lo, hiV: hi, loClosed: a.open == '[', hiClosed: a.close == ']'}}, "", true
	case "eq":
		if !isVar(a.items[0]) {
			return nil, "", false
		}
		x, ok := realValue(a.items[1], b)
		if !ok || math.IsInf(x, 0) {
			return nil, "", false
		}
		return []interval{{lo: a.items[1], hi: a.items[1], loV: x, hiV: x, loClosed: true, hiClosed: true}}, a.items[0].expr.name, true
	case "set":
		for _, it := range a.items {
			if it.kind == "expr" {
				x, ok := realValue(it, b)
				if !ok || math.IsInf(x, 0) {
					return nil, "", false
				}
				ivs = append(ivs, interval{lo: it, hi: it, loV: x, hiV: x, loClosed: true, hiClosed: true})
				continue
			}
			sub, _, ok := toIntervals(it, b)
			if !ok || it.kind == "eq" {
				return nil, "", false
			}
			ivs = append(ivs, sub...)
		}
		return normIntervals(ivs), "", true
	}
	return nil, "", false
}

// normIntervals sorts intervals, drops empty ones and merges those that
// overlap or touch at a point one of them contains.
func normIntervals(ivs []interval) []interval {
	var out []interval
	for _, iv := range ivs {
		if iv.loV < iv.hiV || iv.loV == iv.hiV && iv.loClosed && iv.hiClosed {
			out = append(out, iv)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].loV != out[j].loV {
			return out[i].loV < out[j].loV
		}
		return out[i].loClosed && !out[j].loClosed
	})
	merged := out[:0]
	for _, iv := range out {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			if iv.loV < last.hiV || iv.loV == last.hiV && (last.hiClosed || iv.loClosed) {
				if iv.hiV > last.hiV || iv.hiV == last.hiV && iv.hiClosed {
					last.hi, last.hiV, last.hiClosed = iv.hi, iv.hiV, iv.hiClosed
				}
				continue
			}
		}
		merged = append(merged, iv)
	}
	return merged
}

// intersect is the intersection of two normalized unions of intervals.
func intersect(x, y []interval, b *budget) ([]interval, bool) {
	var out []interval
	for _, p := range x {
		for _, q := range y {
			if b.spend() != nil {
				return nil, false
			}
			iv := p
			if q.loV > iv.loV || q.loV == iv.loV && !q.loClosed {
				iv.lo, iv.loV, iv.loClosed = q.lo, q.loV, q.loClosed
			}
			if q.hiV < iv.hiV || q.hiV == iv.hiV && !q.hiClosed {
				iv.hi, iv.hiV, iv.hiClosed = q.hi, q.hiV, q.hiClosed
			}
			out = append(out, iv)
		}
	}
	return normIntervals(out), true
}

// joinRelations combines the parts of "… or …" / "… and …" when one of
// them is an inequality: the union or the intersection of their sets, all
// in the same variable. ok is false when no part is an inequality.
func joinRelations(parts []*answer, and bool, b *budget) (a *answer, ok bool) {
	hasIneq := false
	for _, p := range parts {
		hasIneq = hasIneq || p.kind == "ineq"
	}
	if !hasIneq {
		return nil, false
	}
	fail := &answer{kind: "text", text: "\x00unreadable relations"}
	var acc []interval
	name := ""
	for i, p := range parts {
		ivs, n, ok := toIntervals(p, b)
		if !ok || n == "" || name != "" && n != name {
			return fail, true
		}
		name = n
		switch {
		case i == 0 || !and:
			acc = append(acc, ivs...) // a union is normalized once, below
		default:
			if acc, ok = intersect(acc, ivs, b); !ok {
				return fail, true
			}
		}
	}
	return &answer{kind: "ineq", text: name, ivals: normIntervals(acc)}, true
}

// sameRealSet compares two answers as subsets of the real line. Two
// inequalities must name the same variable; an interval names none.
func sameRealSet(gold, pred *answer, b *budget) bool {
	x, nx, ok1 := toIntervals(gold, b)
	y, ny, ok2 := toIntervals(pred, b)
	if !ok1 || !ok2 || len(x) != len(y) || nx != "" && ny != "" && nx != ny {
		return false
	}
	for i := range x {
		if x[i].loClosed != y[i].loClosed || x[i].hiClosed != y[i].hiClosed ||
			!equivalent(x[i].lo, y[i].lo, b) || !equivalent(x[i].hi, y[i].hi, b) {
			return false
		}
	}
	return true
}
