package main

import (
	"fmt"
	"regexp"
	"strings"
)

// Source rewrites applied to gotch v0.9.1's ts package. Each is a plain text
// transform so it can be tested on snippets; each reports how many places it
// changed so the preparation fails loudly if gotch's code is not what we
// expect.

// Every generated op allocates its out-pointer with C.malloc(0), never frees
// it, and lets C++ write one tensor pointer per output into it. malloc(0)
// returns a minimum-size chunk, so this is a leak per op plus a write past
// the requested size. The out slots become Go-allocated arrays of the right
// length: C writes C pointers into Go memory, which cgo allows, and the GC
// frees them.
var (
	mallocOut  = regexp.MustCompile(`^(\s*)(\w+) := \(\*lib\.(Ctensor|Civalue)\)\(unsafe\.Pointer\(C\.malloc\(0\)\)\)\s*$`)
	nextOutPtr = regexp.MustCompile(`^(\s*)(\w+) := \(\*lib\.Ctensor\)\(unsafe\.Pointer\(uintptr\(unsafe\.Pointer\(\w+\)\) \+ unsafe\.Sizeof\(\w+\)\)\)\s*$`)
	// A list getter (jit.go) writes `len` elements into the malloc(0) block.
	listCall = regexp.MustCompile(`lib\.Ati\w+List\(|lib\.AtiToTuple\(`)
)

func fixMallocOut(src string) (string, int) {
	lines := strings.Split(src, "\n")
	var out []string
	n := 0
	for i := 0; i < len(lines); i++ {
		m := mallocOut.FindStringSubmatch(lines[i])
		if m == nil {
			out = append(out, lines[i])
			continue
		}
		indent, name, typ := m[1], m[2], m[3]
		// Variable-length list outputs (TorchScript IValues) get a C block
		// sized by the call's length argument instead; see fixListOut.
		if i+1 < len(lines) && listCall.MatchString(lines[i+1]) {
			out = append(out, lines[i])
			continue
		}
		k := 1
		for i+k < len(lines) && nextOutPtr.MatchString(lines[i+k]) {
			k++
		}
		arr := name + "Slots"
		out = append(out, fmt.Sprintf("%s%s := new([%d]lib.%s)", indent, arr, k, typ))
		out = append(out, fmt.Sprintf("%s%s := &%s[0]", indent, name, arr))
		for j := 1; j < k; j++ {
			mm := nextOutPtr.FindStringSubmatch(lines[i+j])
			out = append(out, fmt.Sprintf("%s%s := &%s[%d]", mm[1], mm[2], arr, j))
		}
		i += k - 1
		n++
	}
	return strings.Join(out, "\n"), n
}

var listOut = regexp.MustCompile(`^(\s*)(\w+) := (\(\*lib\.(?:Ctensor|Civalue)\))?\(?unsafe\.Pointer\(C\.malloc\(0\)\)\)?\s*$`)

// fixListOut sizes the jit.go list buffers by the element count the next
// line passes (int(len)) and frees them when the function returns; the
// values are copied out before that.
func fixListOut(src string) (string, int) {
	lines := strings.Split(src, "\n")
	n := 0
	for i := 0; i+1 < len(lines); i++ {
		m := listOut.FindStringSubmatch(lines[i])
		if m == nil || !listCall.MatchString(lines[i+1]) || !strings.Contains(lines[i+1], "int(len)") {
			continue
		}
		indent, name, cast := m[1], m[2], m[3]
		alloc := "C.malloc(C.size_t(len+1) * 8)"
		if cast != "" {
			lines[i] = fmt.Sprintf("%s%s := %s(unsafe.Pointer(%s))\n%sdefer C.free(unsafe.Pointer(%s))", indent, name, cast, alloc, indent, name)
		} else {
			lines[i] = fmt.Sprintf("%s%s := unsafe.Pointer(%s)\n%sdefer C.free(%s)", indent, name, alloc, indent, name)
		}
		n++
	}
	return strings.Join(lines, "\n"), n
}

// fixFatal turns log.Fatal in Must* helpers into panics, so an error such as
// an out-of-memory can be recovered at a training step's boundary (and a
// checkpoint written) instead of killing the process.
func fixFatal(src string) (string, int) {
	n := strings.Count(src, "log.Fatal")
	src = strings.ReplaceAll(src, "log.Fatal(err)", "panic(err)")
	src = strings.ReplaceAll(src, "log.Fatalf(", "log.Panicf(")
	src = strings.ReplaceAll(src, "log.Fatalln(", "log.Panicln(")
	src = strings.ReplaceAll(src, "log.Fatal(", "log.Panic(")
	return src, n
}

// fixBigStruct drops the 100 KB Go allocation gotch attaches to every tensor
// to make the garbage collector run finalizers sooner. lanpo frees tensors
// explicitly (scoped lifetimes), so the ballast only costs allocation and GC
// time; the finalizer stays as a safety net.
func fixBigStruct(src string) (string, int) {
	const line = "\tx.d = new(bigStruct)\n"
	n := strings.Count(src, line)
	return strings.ReplaceAll(src, line, ""), n
}

// fixTorchErr makes gotch's errors read as one line of what libtorch said:
// upstream appends the Go stack of the call to every error message.
func fixTorchErr(src string) (string, int) {
	const old = "\t\ttrace := string(debug.Stack())\n\t\treturn fmt.Errorf(\"Libtorch API Error: %v\\n%v\\n\", errStr, trace)\n"
	const repl = "\t\treturn fmt.Errorf(\"libtorch: %s\", errStr)\n"
	n := strings.Count(src, old)
	src = strings.ReplaceAll(src, old, repl)
	if n > 0 {
		src = strings.Replace(src, "\t\"runtime/debug\"\n", "", 1)
	}
	return src, n
}

// fixProtect makes gotch's C++ error guard keep c10::Error's message without
// its C++ backtrace (addresses inside libtorch mean nothing to a user) and
// catch non-standard exceptions too, which would otherwise cross the C
// boundary and abort the process.
func fixProtect(src string) (string, int) {
	const old = "  } catch (const exception &e) {                                               \\\n" +
		"    torch_last_err = strdup(e.what());                                         \\\n" +
		"  }\n"
	const repl = "  } catch (const c10::Error &e) {                                              \\\n" +
		"    torch_last_err = strdup(e.what_without_backtrace());                       \\\n" +
		"  } catch (const exception &e) {                                               \\\n" +
		"    torch_last_err = strdup(e.what());                                         \\\n" +
		"  } catch (...) {                                                              \\\n" +
		"    torch_last_err = strdup(\"unknown C++ exception\");                        \\\n" +
		"  }\n"
	n := strings.Count(src, old)
	return strings.ReplaceAll(src, old, repl), n
}

// fixInplaceHandle frees the receiver's old handle in generated in-place
// ops. Upstream replaces ts.ctensor with the fresh handle the C++ side
// returns and never deletes the old one; the old handle keeps a reference to
// the tensor, so its storage is never freed once the tensor is dropped.
func fixInplaceHandle(src string) (string, int) {
	const old = "\n  ts.ctensor = *ptr\n"
	const repl = "\n  lib.AtFree(ts.ctensor)\n  ts.ctensor = *ptr\n"
	n := strings.Count(src, old)
	return strings.ReplaceAll(src, old, repl), n
}

// ensureUsed appends blank uses of imports that a rewrite may have left
// unused, so the file still compiles.
func ensureUsed(src string, pkgs ...string) string {
	var b strings.Builder
	b.WriteString(src)
	for _, p := range pkgs {
		switch p {
		case "unsafe":
			if strings.Contains(src, "\"unsafe\"") {
				b.WriteString("\nvar _ unsafe.Pointer\n")
			}
		case "log":
			if strings.Contains(src, "\"log\"") {
				b.WriteString("\nvar _ = log.Printf\n")
			}
		}
	}
	return b.String()
}
