package reward

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkSandboxOverhead is the per-candidate cost of the sandbox against
// starting the interpreter bare, in the same run:
//
//	go test -run - -bench SandboxOverhead -benchtime 40x ./reward
//
// bare: python3 -I -c pass; none: reward.sandbox none (limits, harness,
// nonce); namespaces: the default. Each reports its ratio to bare
// (x_bare), measured in the same process just before it.
func BenchmarkSandboxOverhead(b *testing.B) {
	c := DefaultCodeConfig()
	c.Concurrency = 1
	ns, err := NewSandbox(SandboxNamespaces, c)
	if err != nil {
		b.Fatal(err)
	}
	none, err := NewSandbox(SandboxNone, c)
	if err != nil {
		b.Fatal(err)
	}
	req := CodeRequest{Program: correctF, Tests: checksF, EntryPoint: "f"}
	bare := func() time.Duration {
		t0 := time.Now()
		if err := exec.Command(ns.python, "-I", "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for _, s := range []struct {
		name string
		sb   *Sandbox
	}{{"bare", nil}, {"none", none}, {"namespaces", ns}} {
		b.Run(s.name, func(b *testing.B) {
			var base, own time.Duration
			for i := 0; i < b.N; i++ {
				base += bare()
				if s.sb == nil {
					continue
				}
				t0 := time.Now()
				o, err := s.sb.Run(context.Background(), req)
				if err != nil || !o.Passed {
					b.Fatalf("%v %+v", err, o)
				}
				own += time.Since(t0)
			}
			b.ReportMetric(float64(base.Microseconds())/float64(b.N)/1000, "ms_bare")
			if s.sb != nil {
				b.ReportMetric(float64(own.Microseconds())/float64(b.N)/1000, "ms/candidate")
				b.ReportMetric(float64(own)/float64(base), "x_bare")
			}
		})
	}
}
