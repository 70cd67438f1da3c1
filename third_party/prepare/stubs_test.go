package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A miniature of gotch's layout: api.h declares what the generated
// functions call (and, like torch_api.h, defines the error slot unless a
// part includes it), main.cpp defines it and includes gen.h, in which two
// functions do not compile (an unknown identifier; an error inside a
// template from api.h, reported there but "required from" the part).
const (
	stubAPI = `#include <cstring>
#include <cstdlib>
#include <cstdint>
#ifdef LANPO_GOTCH_PART
extern thread_local char *torch_last_err;
#else
thread_local char *torch_last_err = nullptr;
#endif
typedef void *tensor;
template <class T> int twice(T t) { return t.value * 2; }
int add(int a, int b);
`
	stubMain = `#include "api.h"
#include "stb_fake.h"
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

func miniGotch(t *testing.T, main string) string {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Fatalf("g++ is required to build lanpo: %v", err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "api.h"), stubAPI)
	// Like gotch's stb image implementations: main.cpp's alone.
	writeFile(t, filepath.Join(dir, "stb_fake.h"), "#ifdef LANPO_GOTCH_PART\n#error the parts must not include stb_fake.h\n#endif\n")
	writeFile(t, filepath.Join(dir, "main.cpp"), main)
	writeFile(t, filepath.Join(dir, "gen.h"), stubGen)
	return dir
}

func TestCompileWrapperStubsUnavailableOps(t *testing.T) {
	for _, parts := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%d parts", parts), func(t *testing.T) {
			dir := miniGotch(t, stubMain)
			objs, ops, times, err := compileWrapper(dir, "main.cpp", "gen.h", parts, []string{"-std=c++17", "-I."}, 2, "9.9.9", t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"atg_template", "atg_unknown"}; !reflect.DeepEqual(ops, want) {
				t.Fatalf("stubbed %v, want %v", ops, want)
			}
			if len(objs) < 2 || len(objs) > parts+1 || len(times) != len(objs) {
				t.Fatalf("%d objects, %d timings for %d parts", len(objs), len(times), parts)
			}
			for i, o := range objs {
				if !fileExists(o) {
					t.Errorf("object %s missing", o)
				}
				if times[i].File == "" || times[i].CPUSecs <= 0 {
					t.Errorf("no CPU time recorded for %s: %+v", o, times[i])
				}
			}
			var all strings.Builder
			parts, _ := filepath.Glob(filepath.Join(dir, "part_*.cpp"))
			for _, p := range parts {
				b, _ := os.ReadFile(p)
				all.Write(b)
			}
			for _, want := range []string{
				`torch_last_err = strdup("lanpo: torch op atg_unknown is not available`,
				"libtorch 9.9.9",
				"  return {};\n}",  // the non-void stub returns a value
				"(void)add(x, x);", // good functions are untouched
				"#define LANPO_GOTCH_PART 1",
			} {
				if !strings.Contains(all.String(), want) {
					t.Errorf("parts lack %q:\n%s", want, all.String())
				}
			}
			// The objects link: one definition of the error slot and of add.
			prog := filepath.Join(dir, "prog.cpp")
			writeFile(t, prog, "#define LANPO_GOTCH_PART 1\n#include \"api.h\"\nvoid atg_good(tensor *, int);\nint main() { tensor t; atg_good(&t, 1); return t != nullptr; }\n")
			out, err := exec.Command("g++", append([]string{"-I" + dir, prog, "-o", filepath.Join(dir, "prog")}, objs...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("the compiled parts do not link: %v\n%s", err, out)
			}
		})
	}
}

func TestCompileWrapperRefusesErrorsOutsideGeneratedCode(t *testing.T) {
	t.Run("main file", func(t *testing.T) {
		dir := miniGotch(t, stubMain+"int broken = nope;\n")
		_, _, _, err := compileWrapper(dir, "main.cpp", "gen.h", 2, []string{"-I."}, 2, "9.9.9", t.Logf)
		if err == nil || !strings.Contains(err.Error(), "not stubbable") || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("want an error quoting the compiler, got %v", err)
		}
	})
	t.Run("no include of the generated file", func(t *testing.T) {
		dir := miniGotch(t, strings.Replace(stubMain, `#include "gen.h"`, "", 1))
		_, _, _, err := compileWrapper(dir, "main.cpp", "gen.h", 2, []string{"-I."}, 2, "9.9.9", t.Logf)
		if err == nil || !strings.Contains(err.Error(), "includes gen.h 0 times") {
			t.Fatalf("got %v", err)
		}
	})
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
