package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestFixMallocOut(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{
			name: "one output",
			in:   "  ptr := (*lib.Ctensor)(unsafe.Pointer(C.malloc(0)))\n  lib.AtgAbs(ptr, ts.ctensor)",
			want: "  ptrSlots := new([1]lib.Ctensor)\n  ptr := &ptrSlots[0]\n  lib.AtgAbs(ptr, ts.ctensor)",
			n:    1,
		},
		{
			name: "three outputs",
			in: "  ctensorPtr0 := (*lib.Ctensor)(unsafe.Pointer(C.malloc(0)))\n" +
				"  ctensorPtr1 := (*lib.Ctensor)(unsafe.Pointer(uintptr(unsafe.Pointer(ctensorPtr0)) + unsafe.Sizeof(ctensorPtr0)))\n" +
				"  ctensorPtr2 := (*lib.Ctensor)(unsafe.Pointer(uintptr(unsafe.Pointer(ctensorPtr1)) + unsafe.Sizeof(ctensorPtr0)))\n" +
				"  lib.AtgSvd(ctensorPtr0, ts.ctensor)",
			want: "  ctensorPtr0Slots := new([3]lib.Ctensor)\n  ctensorPtr0 := &ctensorPtr0Slots[0]\n" +
				"  ctensorPtr1 := &ctensorPtr0Slots[1]\n  ctensorPtr2 := &ctensorPtr0Slots[2]\n  lib.AtgSvd(ctensorPtr0, ts.ctensor)",
			n: 1,
		},
		{
			name: "variable-length list left to fixListOut",
			in:   "\t\tptr1 := (*lib.Civalue)(unsafe.Pointer(C.malloc(0)))\n\t\tlib.AtiToTuple(cval.civalue, ptr1, int(len))",
			want: "\t\tptr1 := (*lib.Civalue)(unsafe.Pointer(C.malloc(0)))\n\t\tlib.AtiToTuple(cval.civalue, ptr1, int(len))",
			n:    0,
		},
		{
			name: "comment untouched",
			in:   "// ptr := (*lib.Ctensor)(unsafe.Pointer(C.malloc(0)))",
			want: "// ptr := (*lib.Ctensor)(unsafe.Pointer(C.malloc(0)))",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := fixMallocOut(tc.in)
			if got != tc.want || n != tc.n {
				t.Errorf("got (%d)\n%s\nwant (%d)\n%s", n, got, tc.n, tc.want)
			}
		})
	}
}

func TestFixListOut(t *testing.T) {
	in := "\t\tptr1 := unsafe.Pointer(C.malloc(0))\n\t\tlib.AtiToIntList(cval.civalue, ptr1, int(len))"
	got, n := fixListOut(in)
	want := "\t\tptr1 := unsafe.Pointer(C.malloc(C.size_t(len+1) * 8))\n\t\tdefer C.free(ptr1)\n\t\tlib.AtiToIntList(cval.civalue, ptr1, int(len))"
	if got != want || n != 1 {
		t.Errorf("got (%d)\n%s\nwant\n%s", n, got, want)
	}
}

func TestFixFatalAndBigStruct(t *testing.T) {
	src := "if err != nil {\n\tlog.Fatal(err)\n}\nlog.Fatalf(\"x %v\", y)\n\tx.d = new(bigStruct)\n"
	got, n := fixFatal(src)
	got, m := fixBigStruct(got)
	want := "if err != nil {\n\tpanic(err)\n}\nlog.Panicf(\"x %v\", y)\n"
	if got != want || n != 2 || m != 1 {
		t.Errorf("got (%d, %d)\n%q\nwant\n%q", n, m, got, want)
	}
}

// TestPatchRealGotch applies the rewrites to gotch v0.9.1 from the module
// cache and checks that no out-pointer malloc(0) or log.Fatal is left in
// code and that every rewritten file still parses.
func TestPatchRealGotch(t *testing.T) {
	src, err := gotchSource()
	if err != nil {
		t.Fatalf("gotch %s not in the module cache: %v", gotchVersion, err)
	}
	dir := t.TempDir()
	if err := copyTree(filepath.Join(src, "ts"), dir); err != nil {
		t.Fatal(err)
	}
	if err := patchTS(dir); err != nil {
		t.Fatal(err)
	}
	// Code lines only: comment lines start with //, /* or *.
	leftover := regexp.MustCompile(`(?m)^[ \t]*[^/* \t\n][^\n]*\b(C\.malloc\(0\)|log\.Fatal)`)
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := leftover.Find(b); m != nil {
			t.Errorf("%s still has %q", filepath.Base(f), m)
		}
		if _, err := parser.ParseFile(fset, f, b, parser.SkipObjectResolution); err != nil {
			t.Errorf("rewritten %s does not parse: %v", filepath.Base(f), err)
		}
		if strings.Contains(string(b), "new(bigStruct)") {
			t.Errorf("%s still allocates the 100 KB ballast", filepath.Base(f))
		}
	}
}

func TestPatchTorchAPIHeader(t *testing.T) {
	src, err := gotchSource()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(src, "libtch", "torch_api.h"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "torch_api.h")
	os.WriteFile(p, b, 0o644)
	if err := patchTorchAPIHeader(p); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	for _, want := range []string{"catch (const c10::Error &e)", "what_without_backtrace()", "catch (...)",
		"#ifdef LANPO_GOTCH_PART\nextern thread_local char *torch_last_err;\n#else\nthread_local char *torch_last_err = nullptr;\n#endif"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("patched PROTECT lacks %q", want)
		}
	}
	if err := patchFile(p, fixProtect); err == nil {
		t.Error("patching twice should find nothing to patch and fail")
	}
}

func TestFixInplaceHandle(t *testing.T) {
	in := "  lib.AtgAdd_(ptr, ts.ctensor, other.ctensor)\n  if err = TorchErr(); err != nil {\n    return err\n  }\n  ts.ctensor = *ptr\n  \n  return err"
	got, n := fixInplaceHandle(in)
	want := "  lib.AtgAdd_(ptr, ts.ctensor, other.ctensor)\n  if err = TorchErr(); err != nil {\n    return err\n  }\n  lib.AtFree(ts.ctensor)\n  ts.ctensor = *ptr\n  \n  return err"
	if got != want || n != 1 {
		t.Errorf("got (%d)\n%s", n, got)
	}
}
