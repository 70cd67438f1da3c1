package reward

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode"
)

// node is a parsed LaTeX math expression. The parser never evaluates
// anything: it builds this tree, which eval.go walks with bounded work.
type node struct {
	op   string   // "num", "var", "const", "+", "*", "^", "neg", "fn", "!", "binom", "inf"
	num  *big.Rat // op "num"
	name string   // var/const/fn name
	kids []*node
}

// Limits on what the parser accepts: inputs beyond them are "not
// equivalent", never slow.
const (
	maxExprLen   = 2000
	maxExprDepth = 60
	maxNumDigits = 400
)

var errTooComplex = errors.New("expression too large or too deep")

type token struct {
	kind string // "num", "id", "cmd", "op"
	text string
}

// lex splits normalized LaTeX into tokens.
func lex(s string) ([]token, error) {
	var out []token
	rs := []rune(s)
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r >= '0' && r <= '9' || r == '.' && i+1 < len(rs) && rs[i+1] >= '0' && rs[i+1] <= '9':
			j := i
			dot := false
			for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' || rs[j] == '.' && !dot && j+1 < len(rs) && rs[j+1] >= '0' && rs[j+1] <= '9') {
				if rs[j] == '.' {
					dot = true
				}
				j++
			}
			if j-i > maxNumDigits {
				return nil, errTooComplex
			}
			out = append(out, token{"num", string(rs[i:j])})
			i = j
		case r == '\\':
			j := i + 1
			for j < len(rs) && unicode.IsLetter(rs[j]) {
				j++
			}
			if j == i+1 && j < len(rs) { // \{ \} \, \\ ...
				j++
			}
			out = append(out, token{"cmd", string(rs[i:j])})
			i = j
		case unicode.IsLetter(r):
			out = append(out, token{"id", string(r)})
			i++
		case strings.ContainsRune("+-*/^_!()[]{}|,=<>'", r):
			out = append(out, token{"op", string(r)})
			i++
		case r == '·' || r == '×':
			out = append(out, token{"op", "*"})
			i++
		case r == '÷':
			out = append(out, token{"op", "/"})
			i++
		case r == '−':
			out = append(out, token{"op", "-"})
			i++
		case r == 'π':
			out = append(out, token{"cmd", `\pi`})
			i++
		case r == '∞':
			out = append(out, token{"cmd", `\infty`})
			i++
		case r == '√':
			out = append(out, token{"cmd", `\sqrt`})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q", r)
		}
	}
	return out, nil
}

type parser struct {
	toks  []token
	pos   int
	depth int
}

// parseExpr parses one expression (no top-level commas or relations).
func parseExpr(s string) (*node, error) {
	if len(s) > maxExprLen {
		return nil, errTooComplex
	}
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, errors.New("empty expression")
	}
	p := &parser{toks: toks}
	n, err := p.sum()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	return n, nil
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) is(kind, text string) bool {
	t := p.peek()
	return t.kind == kind && t.text == text
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxExprDepth {
		return errTooComplex
	}
	return nil
}

func (p *parser) sum() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	first, err := p.product()
	if err != nil {
		return nil, err
	}
	terms := []*node{first}
	for {
		switch {
		case p.is("op", "+"):
			p.pos++
			t, err := p.product()
			if err != nil {
				return nil, err
			}
			terms = append(terms, t)
		case p.is("op", "-"):
			p.pos++
			t, err := p.product()
			if err != nil {
				return nil, err
			}
			terms = append(terms, &node{op: "neg", kids: []*node{t}})
		default:
			if len(terms) == 1 {
				return first, nil
			}
			return &node{op: "+", kids: terms}, nil
		}
	}
}

func (p *parser) product() (*node, error) {
	first, err := p.unary()
	if err != nil {
		return nil, err
	}
	factors := []*node{first}
	for {
		t := p.peek()
		switch {
		case t.kind == "op" && t.text == "*" || t.kind == "cmd" && (t.text == `\cdot` || t.text == `\times`):
			p.pos++
			f, err := p.unary()
			if err != nil {
				return nil, err
			}
			factors = append(factors, f)
		case t.kind == "op" && t.text == "/" || t.kind == "cmd" && t.text == `\div`:
			p.pos++
			f, err := p.unary()
			if err != nil {
				return nil, err
			}
			factors = append(factors, &node{op: "^", kids: []*node{f, numInt(-1)}})
		case p.startsAtom():
			// Implicit multiplication: 2x, 3\pi, (a)(b), 2\sqrt{3}.
			f, err := p.power()
			if err != nil {
				return nil, err
			}
			factors = append(factors, f)
		default:
			if len(factors) == 1 {
				return first, nil
			}
			return &node{op: "*", kids: factors}, nil
		}
	}
}

func (p *parser) startsAtom() bool {
	t := p.peek()
	switch t.kind {
	case "num", "id":
		return true
	case "op":
		return t.text == "(" || t.text == "{" || t.text == "["
	case "cmd":
		switch t.text {
		case `\cdot`, `\times`, `\div`:
			return false
		}
		return !structural[t.text] && len(t.text) >= 3 || t.text == `\{`
	}
	return false
}

func (p *parser) unary() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	switch {
	case p.is("op", "-"):
		p.pos++
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: "neg", kids: []*node{n}}, nil
	case p.is("op", "+"):
		p.pos++
		return p.unary()
	}
	return p.power()
}

func (p *parser) power() (*node, error) {
	base, err := p.postfix()
	if err != nil {
		return nil, err
	}
	if p.is("op", "^") {
		p.pos++
		exp, err := p.script()
		if err != nil {
			return nil, err
		}
		return &node{op: "^", kids: []*node{base, exp}}, nil
	}
	return base, nil
}

// script is the argument of ^ or _: a braced group or a single token
// (x^23 is x^2·3 in LaTeX, but x^{23} is x^23).
func (p *parser) script() (*node, error) {
	if p.is("op", "{") {
		return p.group("{", "}")
	}
	t := p.peek()
	switch t.kind {
	case "num":
		p.splitDigit()
		p.pos++
		return numLit(p.toks[p.pos-1].text)
	case "op":
		if t.text == "-" {
			p.pos++
			n, err := p.script()
			if err != nil {
				return nil, err
			}
			return &node{op: "neg", kids: []*node{n}}, nil
		}
		if t.text == "(" {
			return p.postfix()
		}
	}
	return p.postfix()
}

func (p *parser) postfix() (*node, error) {
	n, err := p.atom()
	if err != nil {
		return nil, err
	}
	for p.is("op", "!") {
		p.pos++
		n = &node{op: "!", kids: []*node{n}}
	}
	for p.is("op", "'") { // f' etc.: treat as part of a name
		p.pos++
	}
	return n, nil
}

func (p *parser) group(open, close string) (*node, error) {
	if !p.is("op", open) {
		return nil, fmt.Errorf("expected %s", open)
	}
	p.pos++
	n, err := p.sum()
	if err != nil {
		return nil, err
	}
	if !p.is("op", close) {
		return nil, fmt.Errorf("expected %s", close)
	}
	p.pos++
	return n, nil
}

var constants = map[string]string{`\pi`: "pi", `\e`: "e", `\i`: "i"}

// functions maps LaTeX commands to evaluator names.
var functions = map[string]string{
	`\sin`: "sin", `\cos`: "cos", `\tan`: "tan", `\cot`: "cot", `\sec`: "sec", `\csc`: "csc",
	`\arcsin`: "asin", `\arccos`: "acos", `\arctan`: "atan", `\sinh`: "sinh", `\cosh`: "cosh", `\tanh`: "tanh",
	`\ln`: "ln", `\log`: "log", `\exp`: "exp", `\lg`: "log10",
}

func (p *parser) atom() (*node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t := p.peek()
	switch t.kind {
	case "":
		return nil, errors.New("unexpected end")
	case "num":
		p.pos++
		return numLit(t.text)
	case "id":
		p.pos++
		switch t.text {
		case "e":
			return &node{op: "const", name: "e"}, nil
		case "i":
			return &node{op: "const", name: "i"}, nil
		}
		return p.subscripted(&node{op: "var", name: t.text})
	case "op":
		switch t.text {
		case "(":
			return p.group("(", ")")
		case "{":
			return p.group("{", "}")
		case "[":
			return p.group("[", "]")
		case "|":
			p.pos++
			n, err := p.sum()
			if err != nil {
				return nil, err
			}
			if !p.is("op", "|") {
				return nil, errors.New("unclosed |")
			}
			p.pos++
			return &node{op: "fn", name: "abs", kids: []*node{n}}, nil
		}
	case "cmd":
		p.pos++
		switch t.text {
		case `\frac`, `\cfrac`:
			a, b, err := p.twoArgs()
			if err != nil {
				return nil, err
			}
			return &node{op: "*", kids: []*node{a, {op: "^", kids: []*node{b, numInt(-1)}}}}, nil
		case `\sqrt`:
			var index *node
			if p.is("op", "[") {
				var err error
				if index, err = p.group("[", "]"); err != nil {
					return nil, err
				}
			}
			x, err := p.arg()
			if err != nil {
				return nil, err
			}
			if index == nil {
				index = numInt(2)
			}
			return &node{op: "^", kids: []*node{x, {op: "^", kids: []*node{index, numInt(-1)}}}}, nil
		case `\binom`, `\dbinom`, `\tbinom`:
			a, b, err := p.twoArgs()
			if err != nil {
				return nil, err
			}
			return &node{op: "binom", kids: []*node{a, b}}, nil
		case `\infty`:
			return &node{op: "inf"}, nil
		case `\left`, `\right`, `\big`, `\Big`:
			return p.atom()
		case `\lfloor`, `\lceil`:
			closeCmd, name := `\rfloor`, "floor"
			if t.text == `\lceil` {
				closeCmd, name = `\rceil`, "ceil"
			}
			x, err := p.sum()
			if err != nil {
				return nil, err
			}
			if !p.is("cmd", closeCmd) {
				return nil, fmt.Errorf("unclosed %s", t.text)
			}
			p.pos++
			return &node{op: "fn", name: name, kids: []*node{x}}, nil
		}
		if c, ok := constants[t.text]; ok {
			return &node{op: "const", name: c}, nil
		}
		if f, ok := functions[t.text]; ok {
			return p.function(f)
		}
		if structural[t.text] || len(t.text) < 3 {
			return nil, fmt.Errorf("unsupported command %s", t.text)
		}
		// Any other command names a symbol (\alpha, \rho_{0}, \max).
		return p.subscripted(&node{op: "var", name: t.text})
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

// twoArgs reads the two arguments of \frac or \binom.
func (p *parser) twoArgs() (*node, *node, error) {
	a, err := p.arg()
	if err != nil {
		return nil, nil, err
	}
	b, err := p.arg()
	return a, b, err
}

// arg is a command argument: a braced group, or one token (\frac12).
func (p *parser) arg() (*node, error) {
	if p.is("op", "{") {
		return p.group("{", "}")
	}
	p.splitDigit()
	return p.atom()
}

// splitDigit splits a run of digits at the cursor after its first digit:
// in LaTeX x^23 is x^2·3 and \frac12 is \frac{1}{2}.
func (p *parser) splitDigit() {
	t := p.peek()
	if t.kind != "num" || len(t.text) < 2 || strings.Contains(t.text, ".") {
		return
	}
	rest := append([]token{{"num", t.text[:1]}, {"num", t.text[1:]}}, p.toks[p.pos+1:]...)
	p.toks = append(p.toks[:p.pos:p.pos], rest...)
}

// function parses \sin x, \sin^2 x, \log_2 8, \ln(x).
func (p *parser) function(name string) (*node, error) {
	var power, base *node
	var err error
	if name == "log" && p.is("op", "_") {
		p.pos++
		if base, err = p.script(); err != nil {
			return nil, err
		}
	}
	if p.is("op", "^") {
		p.pos++
		if power, err = p.script(); err != nil {
			return nil, err
		}
	}
	var arg *node
	if p.is("op", "(") || p.is("op", "{") || p.is("op", "[") {
		arg, err = p.atom()
	} else {
		// \sin 2x: the argument is the implicit product that follows.
		var factors []*node
		for p.startsAtom() {
			f, err := p.power()
			if err != nil {
				return nil, err
			}
			factors = append(factors, f)
			if _, isFn := functions[p.peek().text]; isFn {
				break
			}
		}
		switch len(factors) {
		case 0:
			return nil, fmt.Errorf("%s without argument", name)
		case 1:
			arg = factors[0]
		default:
			arg = &node{op: "*", kids: factors}
		}
	}
	if err != nil {
		return nil, err
	}
	n := &node{op: "fn", name: name, kids: []*node{arg}}
	if base != nil {
		// log_b x = ln x / ln b
		n = &node{op: "*", kids: []*node{{op: "fn", name: "ln", kids: []*node{arg}}, {op: "^", kids: []*node{{op: "fn", name: "ln", kids: []*node{base}}, numInt(-1)}}}}
	}
	if power != nil {
		n = &node{op: "^", kids: []*node{n, power}}
	}
	return n, nil
}

// structural commands never name a value.
var structural = map[string]bool{
	`\begin`: true, `\end`: true, `\text`: true, `\rfloor`: true, `\rceil`: true, `\pm`: true, `\mp`: true,
	`\cup`: true, `\cap`: true, `\in`: true, `\le`: true, `\leq`: true, `\ge`: true, `\geq`: true, `\lt`: true, `\gt`: true,
	`\neq`: true, `\approx`: true, `\to`: true, `\rightarrow`: true, `\Rightarrow`: true, `\implies`: true, `\iff`: true,
	`\sum`: true, `\prod`: true, `\int`: true, `\lim`: true, `\overline`: true, `\hline`: true, `\boxed`: true, `\fbox`: true,
}

// subscripted reads an optional subscript into a variable's name: x_1,
// r_{0}, \omega_{n}.
func (p *parser) subscripted(n *node) (*node, error) {
	if !p.is("op", "_") {
		return n, nil
	}
	p.pos++
	if p.is("op", "{") {
		start := p.pos
		if _, err := p.group("{", "}"); err != nil {
			return nil, err
		}
		n.name += "_" + joinTokens(p.toks[start:p.pos])
		return n, nil
	}
	sub := p.peek()
	if sub.kind == "" {
		return nil, errors.New("empty subscript")
	}
	p.pos++
	n.name += "_" + sub.text
	return n, nil
}

func joinTokens(ts []token) string {
	var sb strings.Builder
	for _, t := range ts {
		sb.WriteString(t.text)
	}
	return sb.String()
}

func numInt(v int64) *node { return &node{op: "num", num: new(big.Rat).SetInt64(v)} }

// numLit reads a decimal literal exactly.
func numLit(s string) (*node, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("bad number %q", s)
	}
	return &node{op: "num", num: r}, nil
}
