package reward

import (
	"math/big"
	"regexp"
	"strings"
)

var (
	reThousands  = regexp.MustCompile(`^-?\d{1,3}(,\d{3})+(\.\d+)?$`)
	reMixed      = regexp.MustCompile(`^(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}$`)
	reRepeating  = regexp.MustCompile(`(\d*)\.(\d*)\\overline\{(\d+)\}`)
	reSciE       = regexp.MustCompile(`(\d)[eE]([+-]?\d+)`)
	reNumberUnit = regexp.MustCompile(`^(-?[\d.,]+(?:\\%)?)\s*(?:\\text\{[^{}]*\}|\\mbox\{[^{}]*\}|\\mathrm\{[^{}]*\}|[a-zA-Z][a-zA-Z\s.]*)$`)
	reTextCmd    = regexp.MustCompile(`\\(?:text|textbf|textit|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}`)
	reDegrees    = regexp.MustCompile(`\^\s*\{?\s*\\circ\s*\}?|°`)
	reWholeText  = regexp.MustCompile(`^\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}$`)
	reTwoLetters = regexp.MustCompile(`[A-Za-z]{2}`)
	reThinComma  = regexp.MustCompile(`(\d),\\!\s*(\d)`)
	reMemberOf   = regexp.MustCompile(`^\s*[a-zA-Z]\s*\\in\s*`)
)

// normalize rewrites an extracted answer into the LaTeX subset the parser
// reads: wrappers, spacing commands, \left/\right, display fractions,
// degrees, currency, percent, units and thousands separators go; mixed
// numbers and repeating decimals become fractions.
func normalize(s string) string {
	s = strings.TrimSpace(s)
	s = stripWrappers(s)
	s = strings.ReplaceAll(s, `\\`, "\x00")      // keep matrix row breaks out of the spacing cuts
	s = reThinComma.ReplaceAllString(s, "$1,$2") // 10,\!080 is 10080
	s = strings.ReplaceAll(s, `\!`, "")
	s = removeDollars(s)
	for _, cut := range []string{`\left`, `\right`, `\,`, `\;`, `\:`, `\ `, `\quad`, `\qquad`, `\displaystyle`, `\textstyle`, `\bigl`, `\bigr`, `\Bigl`, `\Bigr`, `\big`, `\Big`, `~`} {
		s = strings.ReplaceAll(s, cut, " ")
	}
	s = strings.NewReplacer(`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\dbinom`, `\binom`, `\tbinom`, `\binom`,
		`\$`, "", `\le `, `\leq `, `\ge `, `\geq `, `\neq`, `\ne`, `\lbrace`, `\{`, `\rbrace`, `\}`,
		`\lvert`, "|", `\rvert`, "|", `\vert`, "|", `\cdotp`, `\cdot`, `\varnothing`, `\emptyset`, "∅", `\emptyset`).Replace(s)
	s = strings.TrimSpace(s)
	if m := reWholeText.FindStringSubmatch(s); m != nil && reWords.MatchString(strings.TrimSpace(m[1])) && reTwoLetters.MatchString(m[1]) {
		return `\text{` + normText(m[1]) + "}" // a word answer: "Monday", "no solution"
	}
	s = reDegrees.ReplaceAllString(s, "")
	s = reMemberOf.ReplaceAllString(s, "")
	s = strings.TrimSpace(s)
	s = strings.TrimRight(s, ".;: ")
	s = strings.TrimSpace(s)
	if m := reNumberUnit.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	// \text{...}: a whole-text answer keeps its words; elsewhere the
	// command goes and its content stays (units are removed above).
	s = reTextCmd.ReplaceAllString(s, "$1")
	s = strings.TrimSpace(s)
	s = strings.TrimRight(s, ".")
	if reThousands.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	if m := reMixed.FindStringSubmatch(s); m != nil {
		s = m[1] + "(" + m[2] + `+\frac{` + m[3] + "}{" + m[4] + "})"
	}
	s = reRepeating.ReplaceAllStringFunc(s, func(r string) string {
		m := reRepeating.FindStringSubmatch(r)
		if f, ok := repeatingFraction(m[1], m[2], m[3]); ok {
			return "(" + f + ")"
		}
		return r
	})
	s = reSciE.ReplaceAllString(s, `${1}\times10^{$2}`)
	s = strings.ReplaceAll(s, "\x00", `\\`)
	return strings.TrimSpace(s)
}

// stripWrappers removes math delimiters around the whole answer.
func stripWrappers(s string) string {
	for {
		t := strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(t, "$$") && strings.HasSuffix(t, "$$") && len(t) >= 4:
			t = t[2 : len(t)-2]
		case strings.HasPrefix(t, "$") && strings.HasSuffix(t, "$") && len(t) >= 2:
			t = t[1 : len(t)-1]
		case strings.HasPrefix(t, `\[`) && strings.HasSuffix(t, `\]`):
			t = t[2 : len(t)-2]
		case strings.HasPrefix(t, `\(`) && strings.HasSuffix(t, `\)`):
			t = t[2 : len(t)-2]
		default:
			return t
		}
		s = t
	}
}

// repeatingFraction turns int.fixed(repeat) into an exact fraction.
func repeatingFraction(intPart, fixed, repeat string) (string, bool) {
	if intPart == "" {
		intPart = "0"
	}
	// x = int + 0.fixed + 0.0..0(repeat)
	a, ok := new(big.Rat).SetString(intPart + "." + fixed + "0")
	if !ok {
		return "", false
	}
	r, ok := new(big.Int).SetString(repeat, 10)
	if !ok {
		return "", false
	}
	den := new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(repeat))), nil), big.NewInt(1))
	den.Mul(den, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fixed))), nil))
	a.Add(a, new(big.Rat).SetFrac(r, den))
	return `\frac{` + a.Num().String() + "}{" + a.Denom().String() + "}", true
}

// removeDollars drops unescaped $ (gold answers like "$2n$", "$69$,$84$").
func removeDollars(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			sb.WriteByte(s[i])
			sb.WriteByte(s[i+1])
			i++
			continue
		}
		if s[i] != '$' {
			sb.WriteByte(s[i])
		}
	}
	return sb.String()
}
