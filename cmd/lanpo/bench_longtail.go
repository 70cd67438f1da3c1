package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/model"
)

// The long-tail comparison (lanpo bench generate --long-tail): the same
// requests, with response lengths drawn from a long-tailed distribution and
// more rows than slots, through consecutive batches (the engine before
// slots) and through the slots engine, in one run. Decode steps, occupancy
// and context tokens are counts of what the engine did — they do not depend
// on the model that ran, so a tiny random model runs them; the modeled GPU
// time prices each decode step at the stated shape and bandwidth: reading
// the weights once plus every row's context (keys and values of its own
// tokens), the cost of a memory-bound decode step.

func longTailFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "long-tail", Usage: "instead of the throughput benchmark: consecutive batches against slots on long-tailed response lengths (decode steps, occupancy, modeled GPU time, CPU wall time)"},
		&cli.IntFlag{Name: "slots", Value: 256, Usage: "--long-tail: rows decoded at once (what lanpo plan gives for 7B GRPO on one 80 GiB GPU: 256 of 512)"},
		&cli.StringFlag{Name: "lengths", Value: "lognormal:600:0.8", Usage: "--long-tail: response lengths, lognormal:MEDIAN:SIGMA (cut at --new-tokens) or a file: one length per line, or JSONL with a \"tokens\" field (lanpo eval's samples.jsonl)"},
		&cli.StringFlag{Name: "model-shape", Value: "7b", Usage: "--long-tail: the shape the GPU time is modeled at: 0.5b, 7b or a config.json"},
		&cli.Float64Flag{Name: "bandwidth-gbs", Value: 3350, Usage: "--long-tail: GPU memory bandwidth in GB/s for the modeled time (H100 SXM: 3350; H200: 4800)"},
	}
}

// longTailMode is one engine's run in the comparison.
type longTailMode struct {
	Steps            int     `json:"decode_steps"`
	Occupancy        float64 `json:"occupancy"`
	OccupancyWaiting float64 `json:"occupancy_until_queue_empty"`
	StepsWaiting     int     `json:"steps_until_queue_empty"`
	ContextTokens    int64   `json:"context_tokens"`
	ModeledGPUS      float64 `json:"modeled_gpu_s"`
	CPUWallS         float64 `json:"cpu_wall_s"`
	Prefills         int     `json:"prefills"`
}

// longTail is what --long-tail --json prints.
type longTail struct {
	Lengths       string       `json:"lengths"`
	Rows          int          `json:"rows"`
	Slots         int          `json:"slots"`
	SumLengths    int          `json:"sum_lengths"`
	MeanLength    float64      `json:"mean_length"`
	MedianLength  int          `json:"median_length"`
	Longest       int          `json:"longest"`
	AtCap         int          `json:"at_cap"`
	Target        float64      `json:"target_steps"` // 1.1 × Σ lengths / slots + longest
	SyncEvery     int          `json:"sync_every"`
	ModelShape    string       `json:"model_shape"`
	WeightsGB     float64      `json:"weights_gb"`
	KVBytesPerTok int64        `json:"kv_bytes_per_token"`
	BandwidthGBs  float64      `json:"bandwidth_gbs"`
	EngineShape   string       `json:"engine_shape"`
	Batches       longTailMode `json:"consecutive_batches"`
	SlotsRun      longTailMode `json:"slots_engine"`
	StepsRatio    float64      `json:"steps_batches_over_slots"`
	GPURatio      float64      `json:"modeled_gpu_batches_over_slots"`
	WallRatio     float64      `json:"cpu_wall_batches_over_slots"`
	TargetMet     bool         `json:"target_met"`
}

// readLengths gives n response lengths, each in [1, maxNew]: drawn from a
// lognormal (seeded), or cycled from a file's.
func readLengths(spec string, n, maxNew int) ([]int, error) {
	if rest, ok := strings.CutPrefix(spec, "lognormal:"); ok {
		parts := strings.Split(rest, ":")
		med, err1 := strconv.ParseFloat(parts[0], 64)
		var sigma float64
		var err2 error
		if len(parts) == 2 {
			sigma, err2 = strconv.ParseFloat(parts[1], 64)
		}
		if len(parts) != 2 || err1 != nil || err2 != nil || med <= 0 || sigma < 0 {
			return nil, usageError{fmt.Errorf("--lengths %s: want lognormal:MEDIAN:SIGMA with MEDIAN > 0, SIGMA ≥ 0", spec)}
		}
		r := rand.New(rand.NewSource(3))
		out := make([]int, n)
		for i := range out {
			out[i] = min(maxNew, max(1, int(math.Round(med*math.Exp(sigma*r.NormFloat64())))))
		}
		return out, nil
	}
	f, err := os.Open(spec)
	if err != nil {
		return nil, usageError{fmt.Errorf("--lengths: %w", err)}
	}
	defer f.Close()
	var from []int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		var v int
		if strings.HasPrefix(s, "{") {
			var rec struct {
				Tokens *int `json:"tokens"`
			}
			if err := json.Unmarshal([]byte(s), &rec); err != nil || rec.Tokens == nil {
				return nil, usageError{fmt.Errorf("--lengths %s:%d: a JSON line needs a numeric \"tokens\" field", spec, line)}
			}
			v = *rec.Tokens
		} else if v, err = strconv.Atoi(s); err != nil {
			return nil, usageError{fmt.Errorf("--lengths %s:%d: %q is not a length", spec, line, s)}
		}
		if v < 1 {
			return nil, usageError{fmt.Errorf("--lengths %s:%d: length %d < 1", spec, line, v)}
		}
		from = append(from, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--lengths %s: %w", spec, err)
	}
	if len(from) == 0 {
		return nil, usageError{fmt.Errorf("--lengths %s: no lengths", spec)}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = min(maxNew, from[i%len(from)])
	}
	return out, nil
}

// longTailEngine is the small random model the comparison's engine runs
// (its counts do not depend on the model): 1 layer, H 64, a 512-token
// vocabulary, positions for any prompt and response here.
func longTailEngine(positions int64) *model.Config {
	return &model.Config{Architectures: []string{"Qwen2ForCausalLM"}, ModelType: "qwen2", VocabSize: 512, HiddenSize: 64,
		IntermediateSize: 128, NumHiddenLayers: 1, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		MaxPositionEmbeddings: positions, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, HiddenAct: "silu"}
}

func runLongTail(c *cli.Context) error {
	dev, dt, err := benchDevice(c)
	if err != nil {
		return err
	}
	// The GRPO step lanpo plan sizes for Qwen2.5-7B, unless set.
	prompts, samples, maxNew := c.Int64("prompts"), c.Int("samples"), c.Int("new-tokens")
	if !c.IsSet("prompts") {
		prompts = 64
	}
	if !c.IsSet("samples") {
		samples = 8
	}
	if !c.IsSet("new-tokens") {
		maxNew = 3072
	}
	rows := int(prompts) * samples
	slots, every := c.Int("slots"), c.Int("sync-every")
	if slots < 1 || rows < 1 || maxNew < 1 || every < 1 {
		return usageError{fmt.Errorf("--long-tail needs --slots, --prompts × --samples, --new-tokens and --sync-every ≥ 1")}
	}
	lengths, err := readLengths(c.String("lengths"), rows, maxNew)
	if err != nil {
		return err
	}
	mshape := c.String("model-shape")
	mcfg, err := shapeNamed("model-shape", mshape)
	if err != nil {
		return err
	}
	if mcfg.HeadDim == 0 {
		mcfg.HeadDim = mcfg.HiddenSize / mcfg.NumAttentionHeads
	}
	promptLen := c.Int64("prompt-len")
	var cfg *model.Config
	engine := "tiny (1 layer, H 64, V 512)"
	if c.IsSet("shape") {
		if cfg, err = benchShape(c); err != nil {
			return err
		}
		engine = c.String("shape")
	} else {
		cfg = longTailEngine((promptLen + int64(maxNew) + 127) / 128 * 128)
	}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: dev, DType: dt}, 1)
	if err != nil {
		return err
	}
	defer m.Close()
	// One request per sample, each with its own length (a cap the engine
	// learns only at its looks, like an end-of-sequence token); the same
	// prompt for a group's samples.
	ids := model.RandomIDs(prompts, promptLen, cfg.VocabSize, 2)
	reqs := make([]model.Request, rows)
	for i := range reqs {
		reqs[i] = model.Request{PromptIDs: ids[i/samples], MaxNewTokens: lengths[i]}
	}
	p := model.SamplingParams{Temperature: 1, MaxNewTokens: maxNew, Seed: 1}
	r := longTail{Lengths: c.String("lengths"), Rows: rows, Slots: slots, SyncEvery: every, ModelShape: mshape,
		BandwidthGBs: c.Float64("bandwidth-gbs"), EngineShape: engine,
		WeightsGB:     float64(mcfg.ParamCount()*2) / 1e9,
		KVBytesPerTok: mcfg.KVCacheBytes(1, 1, 2)}
	sorted := append([]int(nil), lengths...)
	sort.Ints(sorted)
	for _, n := range lengths {
		r.SumLengths += n
		if n == maxNew {
			r.AtCap++
		}
	}
	r.Longest, r.MedianLength = sorted[len(sorted)-1], sorted[len(sorted)/2]
	r.MeanLength = float64(r.SumLengths) / float64(rows)
	r.Target = 1.1*float64(r.SumLengths)/float64(min(slots, rows)) + float64(r.Longest)
	run := func(consecutive bool) (longTailMode, error) {
		var st model.SlotStats
		start := time.Now()
		out, err := m.Generate(reqs, p, model.GenerateOptions{MaxRows: slots, ConsecutiveBatches: consecutive, SyncEvery: every, Stats: &st})
		if err != nil {
			return longTailMode{}, err
		}
		wall := time.Since(start).Seconds()
		for i, s := range out {
			if len(s.IDs) != lengths[i] {
				return longTailMode{}, fmt.Errorf("long tail: sample %d has %d tokens, drawn %d", i, len(s.IDs), lengths[i])
			}
		}
		bytes := float64(st.Steps)*r.WeightsGB*1e9 + float64(st.ContextTokens)*float64(r.KVBytesPerTok)
		return longTailMode{Steps: st.Steps, Occupancy: st.Occupancy(), OccupancyWaiting: st.OccupancyWaiting(),
			StepsWaiting: st.StepsWaiting, ContextTokens: st.ContextTokens, ModeledGPUS: bytes / (r.BandwidthGBs * 1e9),
			CPUWallS: wall, Prefills: st.Prefills}, nil
	}
	if r.Batches, err = run(true); err != nil {
		return err
	}
	if r.SlotsRun, err = run(false); err != nil {
		return err
	}
	r.StepsRatio = float64(r.Batches.Steps) / float64(r.SlotsRun.Steps)
	r.GPURatio = r.Batches.ModeledGPUS / r.SlotsRun.ModeledGPUS
	r.WallRatio = r.Batches.CPUWallS / r.SlotsRun.CPUWallS
	r.TargetMet = float64(r.SlotsRun.Steps) <= r.Target && (r.SlotsRun.StepsWaiting == 0 || r.SlotsRun.OccupancyWaiting >= 0.9)
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(r)
	}
	r.print(c.App.Writer)
	return nil
}

func (r *longTail) print(w io.Writer) {
	fmt.Fprintf(w, "long tail: %d rows in %d slots, lengths %s (mean %.0f, median %d, longest %d, %d at the cap), a look every %d steps\n",
		r.Rows, r.Slots, r.Lengths, r.MeanLength, r.MedianLength, r.Longest, r.AtCap, r.SyncEvery)
	fmt.Fprintf(w, "  modeled GPU: %s shape, weights %.1f GB + %d bytes of KV a context token per step, at %.0f GB/s; engine ran on %s\n",
		r.ModelShape, r.WeightsGB, r.KVBytesPerTok, r.BandwidthGBs, r.EngineShape)
	fmt.Fprintf(w, "  %-20s %12s %10s %18s %14s %12s\n", "engine", "decode steps", "occupancy", "until queue empty", "modeled GPU s", "CPU wall s")
	for _, x := range []struct {
		name string
		m    longTailMode
	}{{"consecutive batches", r.Batches}, {"slots", r.SlotsRun}} {
		fmt.Fprintf(w, "  %-20s %12d %10.3f %18.3f %14.2f %12.2f\n", x.name, x.m.Steps, x.m.Occupancy, x.m.OccupancyWaiting, x.m.ModeledGPUS, x.m.CPUWallS)
	}
	verdict := "met"
	if !r.TargetMet {
		verdict = "missed"
	}
	fmt.Fprintf(w, "  batches/slots: %.2fx decode steps, %.2fx modeled GPU time, %.2fx CPU wall; target (steps ≤ 1.1 × Σ/slots + longest = %.0f, occupancy ≥ 0.9 until the queue empties) %s\n",
		r.StepsRatio, r.GPURatio, r.WallRatio, r.Target, verdict)
}
