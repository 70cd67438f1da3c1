package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A miniature of gotch's layout: main.cpp defines the API the generated
// functions call and includes gen.h, in which two functions do not compile
// (an unknown identifier; an error inside a template, reported in main.cpp
// but "required from" gen.h).
const (
	stubMain = `#include <cstring>
#include <cstdlib>
thread_local char *torch_last_err = nullptr;
typedef void *tensor;
template <class T> int twice(T t) { return t.value * 2; }
int add(int a, int b) { return a + b; }
#include "gen.h"
`
	stubGen = `void atg_good(tensor *out__, int x) {
  out__[0] = nullptr;
  (void)add(x, x);
}

int64_t atg_unknown(tensor self) {
  return not_declared_in_this_torch(self);
}

void atg_template(tensor *out__) {
  int r = twice(3);
  (void)r;
}

void atg_also_good(tensor *out__) {
  out__[0] = nullptr;
}
`
)

func TestStubUnavailableOps(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Fatalf("g++ is required to build lanpo: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.cpp"), []byte(stubMain), 0o644)
	os.WriteFile(filepath.Join(dir, "gen.h"), []byte(stubGen), 0o644)
	ops, err := stubUnavailableOps(dir, "main.cpp", "gen.h", []string{"-include", "cstdint"}, "9.9.9", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"atg_template", "atg_unknown"}; !reflect.DeepEqual(ops, want) {
		t.Fatalf("stubbed %v, want %v", ops, want)
	}
	gen, _ := os.ReadFile(filepath.Join(dir, "gen.h"))
	for _, want := range []string{
		`torch_last_err = strdup("lanpo: torch op atg_unknown is not available`,
		"libtorch 9.9.9",
		"  return {};\n}",  // the non-void stub returns a value
		"(void)add(x, x);", // good functions are untouched
	} {
		if !strings.Contains(string(gen), want) {
			t.Errorf("stubbed gen.h lacks %q:\n%s", want, gen)
		}
	}
	if _, ok, err := syntaxCheck(dir, "main.cpp", []string{"-include", "cstdint"}); err != nil || !ok {
		t.Errorf("stubbed file still fails to compile (err %v)", err)
	}
}

func TestStubRefusesErrorsOutsideGeneratedCode(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.cpp"), []byte(stubMain+"int broken = nope;\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "gen.h"), []byte("void atg_ok(tensor *out__) {\n}\n"), 0o644)
	_, err := stubUnavailableOps(dir, "main.cpp", "gen.h", nil, "9.9.9", t.Logf)
	if err == nil || !strings.Contains(err.Error(), "outside the generated ops") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("want an error quoting the compiler, got %v", err)
	}
}

func TestParseGenerated(t *testing.T) {
	fns := parseGenerated(stubGen)
	var names []string
	for _, f := range fns {
		names = append(names, f.returnType+" "+f.name)
	}
	want := []string{"void atg_good", "int64_t atg_unknown", "void atg_template", "void atg_also_good"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("got %v, want %v", names, want)
	}
}
