package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	app.ErrWriter = &out
	err := app.Run(append([]string{"lanpo"}, args...))
	return out.String(), err
}

func TestEnvJSON(t *testing.T) {
	out, err := runApp(t, "--log-format", "json", "env", "--json", "--ops")
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("env --json printed %q: %v", out, err)
	}
	for _, k := range []string{"torch_version", "libtorch_dir", "cxx11_abi", "cuda_available", "cuda_devices", "gotch_version", "unavailable_ops_count"} {
		if _, ok := r[k]; !ok {
			t.Errorf("env --json lacks %q: %s", k, out)
		}
	}
	if r["gotch_version"] != "v0.9.1" {
		t.Errorf("gotch_version = %v", r["gotch_version"])
	}
}

func TestEnvText(t *testing.T) {
	out, err := runApp(t, "env")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libtorch ", "C++ ABI ", "CUDA available ", "unavailable ops "} {
		if !strings.Contains(out, want) {
			t.Errorf("env output lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"--log-level", "loud", "version"}, {"--log-format", "xml", "version"}} {
		_, err := runApp(t, args...)
		ue, ok := err.(usageError)
		if !ok || ue.ExitCode() != 2 {
			t.Errorf("%v: got %v, want a usage error (exit 2)", args, err)
		}
	}
}
