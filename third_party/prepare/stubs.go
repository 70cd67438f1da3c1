package main

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// gotch v0.9.1's generated ops (libtch/torch_api_generated.cpp.h) are written
// against libtorch 2.1.0's ATen signatures. Against another libtorch some of
// them do not compile. While compiling gotch's wrapper (wrapper.go), the body
// of every generated function the compiler rejects is replaced with one that
// sets gotch's error slot to a message naming the op, so the rest of gotch
// builds and the op fails cleanly if it is ever called.

var (
	// One generated function: "void atg_abs(tensor *out__, tensor self) {"
	funcStart = regexp.MustCompile(`^([A-Za-z_][\w\s\*]*?)\b(atg_\w+)\(.*\)\s*\{\s*$`)
	errorLine = regexp.MustCompile(`:\d+:\d+: (?:fatal )?error: `)
)

type cFunc struct {
	name       string
	returnType string
	start, end int // 0-based line indexes of the signature and the closing brace
}

// parseGenerated finds the generated functions and their line ranges.
func parseGenerated(src string) []cFunc {
	lines := strings.Split(src, "\n")
	var fns []cFunc
	for i := 0; i < len(lines); i++ {
		m := funcStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		fn := cFunc{name: m[2], returnType: strings.TrimSpace(m[1]), start: i, end: -1}
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "}") {
				fn.end = j
				break
			}
		}
		if fn.end < 0 {
			break
		}
		fns = append(fns, fn)
		i = fn.end
	}
	return fns
}

// stubFunctions replaces the bodies of the named functions.
func stubFunctions(src string, fns []cFunc, bad map[string]bool, torchVersion string) string {
	lines := strings.Split(src, "\n")
	var out []string
	prev := 0
	for _, fn := range fns {
		if !bad[fn.name] {
			continue
		}
		out = append(out, lines[prev:fn.start+1]...)
		msg := fmt.Sprintf("lanpo: torch op %s is not available: gotch v0.9.1 generated it for libtorch 2.1.0 and it does not compile against libtorch %s", fn.name, torchVersion)
		out = append(out, fmt.Sprintf("  torch_last_err = strdup(%s);", strconv.Quote(msg)))
		if fn.returnType != "void" {
			out = append(out, "  return {};")
		}
		prev = fn.end
	}
	out = append(out, lines[prev:]...)
	return strings.Join(out, "\n")
}

// failingFunctions maps compiler diagnostics to the generated functions that
// cause them: an error inside a function, or a "required from here" line that
// points at one when the error itself is reported inside a torch header.
// Error lines that point at no generated function are returned as they are.
func failingFunctions(compilerOutput, file string, fns []cFunc) (map[string]bool, []string) {
	ref := regexp.MustCompile(`(?:^|/)` + regexp.QuoteMeta(file) + `:(\d+):\d+:`)
	bad := map[string]bool{}
	var other []string
	for _, line := range strings.Split(compilerOutput, "\n") {
		if m := ref.FindStringSubmatch(line); m != nil {
			ln, _ := strconv.Atoi(m[1])
			idx := sort.Search(len(fns), func(i int) bool { return fns[i].end >= ln-1 })
			if idx < len(fns) && fns[idx].start <= ln-1 {
				bad[fns[idx].name] = true
				continue
			}
		}
		if errorLine.MatchString(line) {
			other = append(other, line)
		}
	}
	return bad, other
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
