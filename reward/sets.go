package reward

import "strings"

// braceSet reports whether s is one set literal \{…\} (the \{ at its start
// closes at its end, unlike \{1\} \cup \{2\}) and returns what is inside.
func braceSet(s string) (string, bool) {
	if !strings.HasPrefix(s, `\{`) || !strings.HasSuffix(s, `\}`) || len(s) < 4 {
		return "", false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			continue
		}
		switch s[i+1] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 && i+2 < len(s) {
				return "", false
			}
		}
		i++
	}
	return s[2 : len(s)-2], depth == 0
}

// parseSetBuilder reads \{x \mid …\}, \{x : …\} and \{x | …\}. The set
// of the x that satisfy an inequality (or x = a) is that subset of the
// real line; any other condition is text, so that a set-builder set is
// never taken for the list of the symbols in it. ok is false when inner is
// not set-builder notation.
func parseSetBuilder(inner string, b *budget) (*answer, bool) {
	var parts []string
	for _, sep := range []string{`\mid`, ":", "|"} {
		if parts = splitOutside(inner, sep, sep != `\mid`); len(parts) == 2 {
			break
		}
	}
	if len(parts) != 2 {
		return nil, false
	}
	head := parts[0]
	if i := strings.Index(head, `\in`); i >= 0 {
		head = head[:i] // \{x \in \mathbb{R} \mid x > 2\}
	}
	v, err := parseExpr(strings.TrimSpace(head))
	if err != nil || v.op != "var" {
		return nil, false // \{1:2\}, \{|x| \}: not set-builder
	}
	text := &answer{kind: "text", text: normText(`\{` + inner + `\}`)}
	cond := parseAnswer(parts[1], b)
	ivs, name, ok := toIntervals(cond, b)
	if !ok || name != v.name {
		return text, true
	}
	return &answer{kind: "ineq", text: name, ivals: ivs}, true
}

// splitConjunction splits s at the words "or" and "and" outside brackets
// ("x = 3 or x = -3", "1, 2, or 3", "x < 0 \text{ or } x > 1" once
// normalized). and reports that the word was "and". A string that mixes
// the two is not split: which binds first is not written.
func splitConjunction(s string) (parts []string, and bool) {
	depth, start := 0, 0
	word := ""
	isLetter := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case c == '\\':
			if i+1 < len(s) && !isLetter(s[i+1]) {
				switch s[i+1] { // \{ \} bracket a set; \, is spacing
				case '{':
					depth++
				case '}':
					depth--
				}
				i++
			}
			for i+1 < len(s) && isLetter(s[i+1]) { // a command name is no word
				i++
			}
		case depth == 0 && isLetter(c) && (i == 0 || !isLetter(s[i-1])):
			j := i
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			w := s[i:j]
			if w == "or" || w == "and" {
				if word != "" && word != w {
					return nil, false
				}
				word = w
				parts = append(parts, s[start:i])
				start = j
			}
			i = j - 1
		}
	}
	if word == "" {
		return nil, false
	}
	parts = append(parts, s[start:])
	out := parts[:0]
	for _, p := range parts {
		if p = strings.Trim(p, " ,"); p != "" {
			out = append(out, p)
		}
	}
	return out, word == "and"
}

// flatten puts the items of the lists among items in their place: \pm 3
// in \{\pm 3\} or "1 \pm \sqrt{5}, -2" stands for two solutions.
func flatten(items []*answer) []*answer {
	n := 0
	for _, it := range items {
		if it.kind == "list" {
			n++
		}
	}
	if n == 0 {
		return items
	}
	var out []*answer
	for _, it := range items {
		if it.kind == "list" {
			out = append(out, it.items...)
		} else {
			out = append(out, it)
		}
	}
	return out
}

// union is A \cup B \cup …: a set of the parts (intervals, sets), or of
// their elements when every part is a set (\{1\} \cup \{2\} is \{1, 2\}).
func union(parts []*answer) *answer {
	var elems []*answer
	for _, p := range parts {
		if p.kind != "set" {
			return &answer{kind: "set", items: parts}
		}
		elems = append(elems, p.items...)
	}
	return &answer{kind: "set", items: elems}
}
