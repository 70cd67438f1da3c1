package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/lanpo-rl/lanpo/csrc"
)

// TestNoUnavailableOpOnLanposPath: none of gotch's generated ops that did
// not compile against this libtorch (stubs, listed by `lanpo env --ops`;
// 3 against libtorch 2.11) is reachable from lanpo's code. It follows each
// stubbed C function (atg_x) to the gotch functions that call it — libtch's
// wrapper, ts's method, ts's Must* form — and looks for calls of those names
// anywhere in lanpo's non-test sources. make test runs it on 2.11, where the
// list is not empty.
func TestNoUnavailableOpOnLanposPath(t *testing.T) {
	info, err := csrc.BuildInfo()
	if err != nil {
		t.Fatal(err)
	}
	if len(info.UnavailableOps) == 0 {
		t.Logf("libtorch %s: no unavailable ops, nothing to check", info.TorchVersion)
		return
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/sugarme/gotch").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/sugarme/gotch: %v", err)
	}
	gotchDir := strings.TrimSpace(string(out))
	// C function → libtch Go function → ts functions (and their Must forms).
	names := map[string]bool{}
	for _, op := range info.UnavailableOps {
		names[op] = true
	}
	lib := callersOf(t, filepath.Join(gotchDir, "libtch"), "C", names)
	ts := callersOf(t, filepath.Join(gotchDir, "ts"), "lib", lib)
	for grew := true; grew; {
		grew = false
		for n := range callersOf(t, filepath.Join(gotchDir, "ts"), "", ts) {
			if !ts[n] {
				ts[n], grew = true, true
			}
		}
	}
	if len(lib) < len(info.UnavailableOps) || len(ts) < len(info.UnavailableOps) {
		t.Fatalf("found %d libtch and %d ts functions for %d unavailable ops %v: the mapping is broken", len(lib), len(ts), len(info.UnavailableOps), info.UnavailableOps)
	}
	t.Logf("libtorch %s: %d unavailable ops, reached through %v", info.TorchVersion, len(info.UnavailableOps), sortedNames(ts))
	// Every selector in lanpo's own code named like one of them.
	for _, hit := range selectorsNamed(t, filepath.Join("..", ".."), ts) {
		t.Errorf("%s, which needs a generated op this libtorch lacks", hit)
	}
}

// The scan finds a call in lanpo's code (the test above would be vacuous
// if it did not).
func TestSelectorsNamedFindsCalls(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\nfunc f(a interface{ _ScaledMm() }) { a._ScaledMm() }\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x\n\nfunc g(a interface{ _ScaledMm() }) { a._ScaledMm() }\n"), 0o644)
	hits := selectorsNamed(t, dir, map[string]bool{"_ScaledMm": true})
	if len(hits) != 1 || !strings.Contains(hits[0], "x.go:3") { // the call in x.go; the test file is ignored
		t.Errorf("got %v", hits)
	}
}

// selectorsNamed lists, as "file:line:col calls name", every selector
// named in names in the non-test Go files under root (third_party, testdata
// and build outputs left out).
func selectorsNamed(t *testing.T, root string, names map[string]bool) []string {
	t.Helper()
	var hits []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "third_party", "testdata", "bin", "runs", "gpu-bundle":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && names[sel.Sel.Name] {
				hits = append(hits, fmt.Sprintf("%s calls %s", fset.Position(sel.Pos()), sel.Sel.Name))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// callersOf returns the functions declared in dir's Go files whose bodies
// call one of targets, qualified by pkg (C.x, lib.X), or, with pkg "",
// through any selector (ts.X, x.Must…).
func callersOf(t *testing.T, dir, pkg string, targets map[string]bool) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	found := map[string]bool{}
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || !targets[sel.Sel.Name] {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); pkg == "" || (ok && id.Name == pkg) {
					found[fn.Name.Name] = true
				}
				return true
			})
		}
	}
	return found
}

func sortedNames(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
