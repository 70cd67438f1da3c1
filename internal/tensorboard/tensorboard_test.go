package tensorboard

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fixtureSteps are the scalars of testdata/fixture.tfevents.
var fixtureSteps = []map[string]float64{
	{"reward_mean": 0.25, "accuracy": 0.125, "loss": -0.0031, "seconds/rollout": 12.5},
	{"reward_mean": 0, "accuracy": 0.5, "loss": 1e-9, "seconds/rollout": 11.25, "eval/gsm8k/zero-shot/mean@k": 0.375},
	{"reward_mean": -1.5, "accuracy": 1, "loss": 123456.789, "seconds/rollout": 0},
}

var fixtureStart = time.Unix(1764000000, 250000000)

func writeFixture(t *testing.T, path string) {
	t.Helper()
	w, err := CreateFile(path, fixtureStart)
	if err != nil {
		t.Fatal(err)
	}
	for i, vals := range fixtureSteps {
		if err := w.Scalars(int64(i+1), fixtureStart.Add(time.Duration(i+1)*time.Second), vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMatchesTensorBoardsReader: the writer's bytes equal the committed
// fixture, and TensorBoard's own loader (scripts/ref/tensorboard_ref.py,
// output committed as fixture.ref.json) read from it exactly the steps,
// tags and values written, as float32.
func TestMatchesTensorBoardsReader(t *testing.T) {
	if os.Getenv("LANPO_WRITE_FIXTURE") == "1" { // regenerate, then re-run scripts/ref/tensorboard_ref.py
		os.Remove("testdata/fixture.tfevents")
		writeFixture(t, "testdata/fixture.tfevents")
	}
	path := filepath.Join(t.TempDir(), "events")
	writeFixture(t, path)
	got, _ := os.ReadFile(path)
	want, err := os.ReadFile("testdata/fixture.tfevents")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the writer's events differ from testdata/fixture.tfevents (LANPO_WRITE_FIXTURE=1 go test ./internal/tensorboard regenerates it; then re-run scripts/ref/tensorboard_ref.py)")
	}
	var ref struct {
		FileVersion string `json:"file_version"`
		Scalars     []struct {
			Step  int64   `json:"step"`
			Wall  float64 `json:"wall_time"`
			Tag   string  `json:"tag"`
			Value float64 `json:"value"`
		} `json:"scalars"`
	}
	b, err := os.ReadFile("testdata/fixture.ref.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vals := range fixtureSteps {
		n += len(vals)
	}
	if ref.FileVersion != "brain.Event:2" || len(ref.Scalars) != n {
		t.Fatalf("TensorBoard read version %q and %d scalars, want %d", ref.FileVersion, len(ref.Scalars), n)
	}
	for _, s := range ref.Scalars {
		v, ok := fixtureSteps[s.Step-1][s.Tag]
		if !ok || s.Value != float64(float32(v)) {
			t.Errorf("TensorBoard read step %d %s = %v, written %v", s.Step, s.Tag, s.Value, v)
		}
		if w := float64(fixtureStart.Add(time.Duration(s.Step)*time.Second).UnixNano()) / 1e9; math.Abs(s.Wall-w) > 1e-6 {
			t.Errorf("step %d wall time %v, written %v", s.Step, s.Wall, w)
		}
	}
}

// TestReadScalars: the reader gives back what was written, as float32.
func TestReadScalars(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	writeFixture(t, path)
	got, err := ReadScalars(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range got {
		if v, ok := fixtureSteps[s.Step-1][s.Tag]; !ok || s.Value != float32(v) {
			t.Errorf("step %d %s = %v, written %v", s.Step, s.Tag, s.Value, v)
		}
		n++
	}
	if n != 13 {
		t.Fatalf("%d scalars read, want 13", n)
	}
	b, _ := os.ReadFile(path)
	b[len(b)-6] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := ReadScalars(path); err == nil {
		t.Fatal("a corrupted record was read")
	}
}

// TestCreateTwiceInOneSecond: two writers of one process in the same
// second get two files (a resumed run in the same process).
func TestCreateTwiceInOneSecond(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		w, err := Create(dir, fixtureStart)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*")); len(files) != 2 {
		t.Fatalf("files %v", files)
	}
}

// TestRecordFraming: every record's length and payload checksums verify
// (a reader that checks them, as TensorBoard's does, accepts the file).
func TestRecordFraming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	writeFixture(t, path)
	b, _ := os.ReadFile(path)
	records := 0
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("a truncated record header: %d bytes left", len(b))
		}
		n := binary.LittleEndian.Uint64(b[:8])
		if maskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:12]) || uint64(len(b)) < 16+n {
			t.Fatalf("record %d: bad length checksum or length %d", records, n)
		}
		data := b[12 : 12+n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(b[12+n:16+n]) {
			t.Fatalf("record %d: bad payload checksum", records)
		}
		b = b[16+n:]
		records++
	}
	if records != 1+len(fixtureSteps) {
		t.Fatalf("%d records, want %d", records, 1+len(fixtureSteps))
	}
}

// writeRestartFixture writes a run's two events files in dir: steps 1–4,
// then, from a resume at step 2, a SessionLog START at step 3 and steps
// 3–5 with other values.
func writeRestartFixture(t *testing.T, dir string) []string {
	t.Helper()
	a, b := filepath.Join(dir, "events.out.tfevents.1764000000.fixture.1"), filepath.Join(dir, "events.out.tfevents.1764000100.fixture.2")
	w, err := CreateFile(a, fixtureStart)
	if err != nil {
		t.Fatal(err)
	}
	for step := int64(1); step <= 4; step++ {
		if err := w.Scalars(step, fixtureStart.Add(time.Duration(step)*time.Second), map[string]float64{"train/reward_mean": float64(step)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	later := fixtureStart.Add(100 * time.Second)
	if w, err = CreateFile(b, later); err != nil {
		t.Fatal(err)
	}
	if err := w.SessionStart(3, later); err != nil {
		t.Fatal(err)
	}
	for step := int64(3); step <= 5; step++ {
		if err := w.Scalars(step, later.Add(time.Duration(step)*time.Second), map[string]float64{"train/reward_mean": float64(10 * step)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	return []string{a, b}
}

// A resumed run's events file starts with a SessionLog START at the first
// redone step; TensorBoard's own EventAccumulator (scripts/ref/
// tensorboard_restart_ref.py, output committed as restart.ref.json) then
// drops the first file's steps from there on: one curve, not two.
func TestRestartMarkerPurgesInTensorBoard(t *testing.T) {
	if os.Getenv("LANPO_WRITE_FIXTURE") == "1" {
		os.RemoveAll("testdata/restart")
		os.MkdirAll("testdata/restart", 0o755)
		writeRestartFixture(t, "testdata/restart")
	}
	files := writeRestartFixture(t, t.TempDir())
	for _, f := range files {
		got, _ := os.ReadFile(f)
		want, err := os.ReadFile(filepath.Join("testdata", "restart", filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs from testdata/restart (LANPO_WRITE_FIXTURE=1 regenerates it; then re-run scripts/ref/tensorboard_restart_ref.py): %v", filepath.Base(f), err)
		}
	}
	if starts, err := ReadSessionStarts(files[1]); err != nil || len(starts) != 1 || starts[0] != 3 {
		t.Fatalf("session starts %v, %v", starts, err)
	}
	var ref struct {
		Scalars map[string][][2]float64 `json:"scalars"`
	}
	b, err := os.ReadFile("testdata/restart.ref.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	want := [][2]float64{{1, 1}, {2, 2}, {3, 30}, {4, 40}, {5, 50}}
	if got := ref.Scalars["train/reward_mean"]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("TensorBoard shows %v, want %v (the first run's steps 3 and 4 purged)", got, want)
	}
}
