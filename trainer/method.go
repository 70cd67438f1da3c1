package trainer

import (
	"fmt"
	"strings"
)

// A training method is one row of methods: its algo.name, the config
// section it owns (with that section's defaults and checks), what it adds
// to the GRPO step — an explorer (explorer.go), an update term (term.go),
// or neither — its optimizer moment groups and the TensorBoard section of
// its metrics. algo.name's values, its error and --help come from the
// table; a method's own file holds its row (grpo's and lanpo's are below,
// sdpo's in sdpo.go, critique-grpo's in critique.go).
type method struct {
	name  string // algo.name
	about string // what it is, for --help
	// section is the config key the method's settings live under ("":
	// none of its own). defaults fills it in DefaultConfig; validate checks
	// it whatever algo.name says (a bad value is a mistake either way) and
	// what the method cannot be combined with when it is the run's.
	section  string
	defaults func(*Config)
	validate func(c *Config, chosen bool) error
	// build makes what the method adds to a run (nil: nothing, plain
	// GRPO).
	build func(g *grpoRun) (methodParts, error)
	// groups are the optimizer's moment groups beside the default one
	// (a term that takes optimizer steps of its own).
	groups func(Config) []string
	// tag: metrics keys starting tag_ go to TensorBoard's tag/ section.
	tag string
	// metrics are zero values of the types its explorer's and term's
	// metrics come in (their JSON names are keys of the step's line;
	// TestMetricsSchema reads them).
	metrics []any
}

// methodParts are what a method adds to the step.
type methodParts struct {
	explorer Explorer
	term     updateTerm
	// save writes the method's state into a checkpoint directory (nil:
	// none beyond the explorer's).
	save func(dir string) error
}

// methods is every training method, in --help's order.
var methods = []*method{&grpoMethod, &lanpoMethod, &sdpoMethod, &critiqueMethod}

// Algorithms (algo.name).
const (
	AlgoGRPO     = "grpo"
	AlgoLANPO    = "lanpo"
	AlgoSDPO     = "sdpo"
	AlgoCritique = "critique-grpo"
)

var grpoMethod = method{name: AlgoGRPO, about: "GRPO (group-relative advantages, PPO-clip loss; DAPO's options)"}

// methodNamed is algo.name's row (nil: none).
func methodNamed(name string) *method {
	for _, m := range methods {
		if m.name == name {
			return m
		}
	}
	return nil
}

// MethodNames are algo.name's values.
func MethodNames() []string {
	out := make([]string, len(methods))
	for i, m := range methods {
		out[i] = m.name
	}
	return out
}

// MethodsHelp is algo.name's values for --help: each with what it is and
// the config section it owns.
func MethodsHelp() string {
	var b strings.Builder
	for _, m := range methods {
		fmt.Fprintf(&b, "  %-14s %s", m.name, m.about)
		if m.section != "" {
			fmt.Fprintf(&b, " (settings: %s.*)", m.section)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// checkMethods resolves algo.name (default grpo) and runs every method's
// checks.
func (c *Config) checkMethods() error {
	if c.Algo.Name == "" {
		c.Algo.Name = AlgoGRPO
	}
	chosen := methodNamed(c.Algo.Name)
	if chosen == nil {
		names := MethodNames()
		return bad("algo.name", "%q: want %s or %s", c.Algo.Name, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	for _, m := range methods {
		if m.validate != nil {
			if err := m.validate(c, m == chosen); err != nil {
				return err
			}
		}
	}
	return nil
}

// momentGroups are the optimizer's moment groups beside the default one
// for a run of kind (sft: none).
func (c Config) momentGroups(kind string) []string {
	if m := methodNamed(c.Algo.Name); kind != "sft" && m != nil && m.groups != nil {
		return m.groups(c)
	}
	return nil
}

// methodTag is the TensorBoard section of a method's metrics key ("":
// not one).
func methodTag(key string) (section, rest string) {
	for _, m := range methods {
		if m.tag != "" {
			if r, ok := strings.CutPrefix(key, m.tag+"_"); ok {
				return m.tag, r
			}
		}
	}
	return "", ""
}
