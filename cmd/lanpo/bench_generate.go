package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/internal/bench"
	"github.com/lanpo-rl/lanpo/model"
)

func benchGenerateCommand() *cli.Command {
	return &cli.Command{
		Name:  "generate",
		Usage: "rollout tokens/s of a random-weight Qwen2.5-shape model against transformers generate(), with the decode step's kernels, host syncs, host and GPU time",
		Description: "Samples --prompts prompts × --samples completions of exactly --new-tokens tokens (EOS never ends a\n" +
			"sample, on either side) from random --prompt-len-token prompts with lanpo's engine (prefix sharing,\n" +
			"static KV cache, every decode step on the device with a look by the host every --sync-every steps; on\n" +
			"CUDA the rows decoded at once are capped by --memory-fraction of the GPU, the rest waiting for\n" +
			"slots; the rows at once are reported), then through --hf-python with transformers' generate() on\n" +
			"the same device, dtype and shape (random weights of its own, made on the device: speed depends on the shape, not the values; on\n" +
			"an out-of-memory error it retries in 2, 4, … sequential batches and says so). lanpo's model and its\n" +
			"cached GPU memory are released before the baseline starts, and the report says how much memory each\n" +
			"side had. With --cuda-graphs the same run again with decode steps replayed as CUDA graphs (on CPU:\n" +
			"the bookkeeping only), against the eager run.\n" +
			"\n" +
			"--count-steps counts what a decode step does on the path a CUDA run takes (SDPA attention), from a\n" +
			"1-layer and a 2-layer model of the shape: leaf kernels per layer (operators that reach a backend\n" +
			"kernel, counted at the dispatcher; a composite operator counts as the kernels it calls), views,\n" +
			"kernels outside the layers, and host↔device synchronizations per generated token. --timing-tokens\n" +
			"steps time every decode step: the host's enqueueing of the step against its GPU time from CUDA\n" +
			"events (launch-bound when the two are close), and the looks. On CPU, --nocache-steps also times the\n" +
			"engine without KV cache.\n" +
			"\n" +
			"--shape: 0.5b (Qwen2.5-0.5B), 7b (Qwen2.5-7B) or a config.json; --layers cuts the layers.\n" +
			"\n" +
			"--long-tail runs another comparison instead: --prompts × --samples responses whose lengths come\n" +
			"from --lengths (a long-tailed distribution, cut at --new-tokens), more rows than --slots, through\n" +
			"consecutive batches of --slots rows (each runs until its longest response ends) and through the\n" +
			"slots engine (a finished row's slot takes the next waiting response), in one run. It reports decode\n" +
			"steps, occupancy (busy slot-steps over slot-steps; also until the queue empties), the modeled GPU\n" +
			"time (each step reads the weights of --model-shape in bf16 once and every row's context, at\n" +
			"--bandwidth-gbs) and the CPU wall time. The counts do not depend on the model that runs them: a\n" +
			"tiny random model runs them unless --shape is given. Unless set, --prompts 64 --samples 8\n" +
			"--new-tokens 3072 (the 7B GRPO step of docs/lora.md). With --json: one object\n" +
			"(consecutive_batches, slots_engine, their ratios, target_met).\n" +
			"--json prints one object per line: lanpo's results as soon as they are in (with hf_pending when the\n" +
			"baseline is still to run), then, after the baseline, the whole object again. Fields: shape, device,\n" +
			"dtype, rows, new_tokens, sync_every, lanpo_tokens_per_s,\n" +
			"lanpo_ms, lanpo_slots (rows decoded at once), kv_cache_mb, graphs_tokens_per_s, graphs_over_eager, graph_warmups,\n" +
			"graph_captures, graph_replays (with --cuda-graphs), hf (transformers' JSON: tokens_per_s, ms, batches, …, or\n" +
			"hf_error), lanpo_over_hf, step_* means over the timed steps (wall_ms, forward_host_ms,\n" +
			"forward_gpu_ms, look_ms) with host_share (the step's enqueueing and looks over wall) and\n" +
			"launch_over_gpu (enqueueing over GPU time), counts (kernels_per_layer, views_per_layer,\n" +
			"layer_kernels, step_kernels_outside_layers, outside_kernels, syncs_per_token, …), and on CUDA gpu,\n" +
			"gpu_total_gib, lanpo_peak_gib (the caching allocator's peak), lanpo_reserved_gib and\n" +
			"gpu_free_gib_for_hf (the driver's free memory once lanpo let go; hf has its own peak_gib).\n" +
			"\n" +
			"The GRPO-shaped batch of the GPU benchmarks (docs/gpu.md):\n" +
			"  lanpo bench generate --device cuda --dtype bfloat16 --shape 7b --prompts 64 --samples 8 \\\n" +
			"    --prompt-len 512 --new-tokens 512 --cuda-graphs --json",
		Flags: append(append(benchModelFlags(),
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu or cuda[:N]"},
			&cli.StringFlag{Name: "dtype", Usage: "float32, bfloat16 or float16 (default float32 on CPU, bfloat16 on CUDA)"},
			&cli.Int64Flag{Name: "prompts", Value: 8},
			&cli.IntFlag{Name: "samples", Value: 4},
			&cli.Int64Flag{Name: "prompt-len", Value: 128},
			&cli.IntFlag{Name: "new-tokens", Value: 128},
			&cli.IntFlag{Name: "sync-every", Value: model.DefaultSyncEvery, Usage: "decode steps between two looks of the host"},
			&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "nucleus sampling (1: off); on CUDA it sorts the vocabulary on the device every step"},
			&cli.BoolFlag{Name: "cuda-graphs", Usage: "also run with decode steps replayed as CUDA graphs"},
			&cli.IntFlag{Name: "timing-tokens", Value: 32, Usage: "decode steps of the timed run (0: none)"},
			&cli.IntFlag{Name: "nocache-steps", Value: 2, Usage: "steps of the no-cache engine (0: skip; CPU only)"},
			&cli.IntFlag{Name: "count-steps", Value: 16, Usage: "decode steps of the kernel and sync count (0: skip)"},
			&cli.Float64Flag{Name: "memory-fraction", Value: 0.9, Usage: "on CUDA, the share of the GPU a generation batch may use"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
		), longTailFlags()...),
		Action: func(c *cli.Context) error {
			if c.Bool("long-tail") {
				return runLongTail(c)
			}
			return runBenchGenerate(c)
		},
	}
}

// genBench is what `lanpo bench generate --json` prints.
type genBench struct {
	Shape           string          `json:"shape"`
	Device          string          `json:"device"`
	DType           string          `json:"dtype"`
	Layers          int64           `json:"layers"`
	Prompts         int             `json:"prompts"`
	Samples         int             `json:"samples"`
	Rows            int             `json:"rows"`
	PromptLen       int64           `json:"prompt_len"`
	NewTokens       int             `json:"new_tokens"`
	TopP            float64         `json:"top_p"`
	SyncEvery       int             `json:"sync_every"`
	LanpoTokensPerS float64         `json:"lanpo_tokens_per_s"`
	LanpoMS         float64         `json:"lanpo_ms"`
	LanpoSlots      int             `json:"lanpo_slots"`
	KVCacheMB       float64         `json:"kv_cache_mb"`
	GraphsTPS       float64         `json:"graphs_tokens_per_s,omitempty"`
	GraphsOverEager float64         `json:"graphs_over_eager,omitempty"`
	GraphWarmUps    int             `json:"graph_warmups,omitempty"`
	GraphCaptures   int             `json:"graph_captures,omitempty"`
	GraphReplays    int             `json:"graph_replays,omitempty"`
	NoCacheTPS      float64         `json:"nocache_tokens_per_s,omitempty"`
	GPU             string          `json:"gpu,omitempty"`
	GPUTotalGiB     float64         `json:"gpu_total_gib,omitempty"`
	LanpoPeakGiB    float64         `json:"lanpo_peak_gib,omitempty"`
	LanpoReservGiB  float64         `json:"lanpo_reserved_gib,omitempty"`
	FreeGiBForHF    float64         `json:"gpu_free_gib_for_hf,omitempty"`
	HFPending       bool            `json:"hf_pending,omitempty"`
	HF              json.RawMessage `json:"hf,omitempty"`
	HFError         string          `json:"hf_error,omitempty"`
	LanpoOverHF     float64         `json:"lanpo_over_hf,omitempty"`
	TimedSteps      int             `json:"timed_steps"`
	StepWallMS      float64         `json:"step_wall_ms"`
	StepFwdHostMS   float64         `json:"step_forward_host_ms"`
	StepFwdGPUMS    float64         `json:"step_forward_gpu_ms"`
	StepLookMS      float64         `json:"step_look_ms"`
	HostShare       float64         `json:"host_share"`
	LaunchOverGPU   float64         `json:"launch_over_gpu,omitempty"`
	Counts          *decodeCounts   `json:"counts,omitempty"`
}

// decodeCounts is what one decode step dispatches on the path a CUDA run
// takes (SDPA attention), from a 1-layer and a 2-layer model of the shape:
// one layer is their difference, the rest of the step (embedding, final
// norm, head, sampling) what the 1-layer model adds to its layer.
type decodeCounts struct {
	Steps           int              `json:"steps"`
	KernelsPerLayer float64          `json:"kernels_per_layer"`
	ViewsPerLayer   float64          `json:"views_per_layer"`
	LayerKernels    map[string]int64 `json:"layer_kernels"` // over all counted steps
	KernelsOutside  float64          `json:"step_kernels_outside_layers"`
	OutsideKernels  map[string]int64 `json:"outside_kernels"`
	SyncsPerToken   float64          `json:"syncs_per_token"`
	UploadsPerToken float64          `json:"uploads_per_token"`
	AsyncPerToken   float64          `json:"async_uploads_per_token"`
	Downloads       float64          `json:"downloads_per_token"`
}

// countDecode measures decodeCounts over steps decode steps of reqs.
func countDecode(cfg *model.Config, opt model.LoadOptions, reqs []model.Request, p model.SamplingParams, steps int) (*decodeCounts, error) {
	count := func(layers int64) (model.DecodeCounts, error) {
		c := *cfg
		c.NumHiddenLayers = layers
		m, err := model.NewRandom(&c, opt, 1)
		if err != nil {
			return model.DecodeCounts{}, err
		}
		defer m.Close()
		if err := m.SetAttention(model.AttentionSDPA); err != nil {
			return model.DecodeCounts{}, err
		}
		var dc model.DecodeCounts
		cp := p
		cp.MaxNewTokens = steps + 1 // the first token comes from the prefill
		_, err = m.Generate(reqs, cp, model.GenerateOptions{Counts: &dc})
		return dc, err
	}
	one, err := count(1)
	if err != nil {
		return nil, err
	}
	two, err := count(2)
	if err != nil {
		return nil, err
	}
	n := float64(one.Steps)
	layer := two.Ops.Sub(one.Ops)
	outside := one.Ops.Sub(layer)
	t := one.Transfers
	return &decodeCounts{Steps: one.Steps, KernelsPerLayer: float64(layer.Kernels) / n, ViewsPerLayer: float64(layer.Views) / n,
		LayerKernels: layer.ByName, KernelsOutside: float64(outside.Kernels) / n, OutsideKernels: outside.ByName,
		SyncsPerToken: one.SyncsPerStep(), UploadsPerToken: float64(t.Uploads) / n, AsyncPerToken: float64(t.AsyncUploads) / n,
		Downloads: float64(t.Downloads) / n}, nil
}

// shapeNamed is a shape flag's config: 0.5b, 7b or a config.json.
func shapeNamed(flag, shape string) (*model.Config, error) {
	switch shape {
	case "0.5b":
		return model.Qwen25_05BShape(), nil
	case "7b":
		return model.Qwen25_7BShape(), nil
	}
	cfg, _, err := loadModelConfig(shape)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s %s: want 0.5b, 7b or a config.json: %w", flag, shape, err)}
	}
	return cfg, nil
}

// benchShape is --shape's config with --layers applied.
func benchShape(c *cli.Context) (*model.Config, error) {
	cfg, err := shapeNamed("shape", c.String("shape"))
	if err != nil {
		return nil, err
	}
	if c.IsSet("layers") {
		cfg.NumHiddenLayers = c.Int64("layers")
	}
	return cfg, nil
}

func runBenchGenerate(c *cli.Context) error {
	dev, dt, err := benchDevice(c)
	if err != nil {
		return err
	}
	if c.Int("sync-every") < 1 {
		return usageError{fmt.Errorf("--sync-every must be ≥ 1, got %d", c.Int("sync-every"))}
	}
	cfg, err := benchShape(c)
	if err != nil {
		return err
	}
	info, err := csrc.BuildInfo()
	if err != nil {
		return err
	}
	m, err := model.NewRandom(cfg, model.LoadOptions{Device: dev, DType: dt}, 1)
	if err != nil {
		return err
	}
	defer m.Close()
	prompts := model.RandomIDs(c.Int64("prompts"), c.Int64("prompt-len"), cfg.VocabSize, 2)
	var reqs []model.Request
	for _, p := range prompts {
		reqs = append(reqs, model.Request{PromptIDs: p, Samples: c.Int("samples")})
	}
	// No stop ids: every sample runs to exactly --new-tokens tokens.
	p := model.SamplingParams{Temperature: 1, TopP: c.Float64("top-p"), MaxNewTokens: c.Int("new-tokens"), Seed: 1}
	if err := p.Validate(); err != nil {
		return usageError{err}
	}
	r := genBench{Shape: c.String("shape"), Device: devString(dev), DType: csrc.DTypeName(dt), Layers: cfg.NumHiddenLayers,
		Prompts: len(reqs), Samples: c.Int("samples"), Rows: len(reqs) * c.Int("samples"), PromptLen: c.Int64("prompt-len"),
		NewTokens: p.MaxNewTokens, TopP: p.TopP, SyncEvery: c.Int("sync-every")}
	w := c.App.Writer
	if !c.Bool("json") {
		fmt.Fprintf(w, "generate: %s shape (%d layers), %s %s, %d prompts × %d samples, %d-token prompts, %d new tokens, %d CPU threads\n",
			r.Shape, cfg.NumHiddenLayers, r.Device, r.DType, r.Prompts, r.Samples, r.PromptLen, p.MaxNewTokens, info.Threads)
	}
	opt := model.GenerateOptions{MemoryFraction: c.Float64("memory-fraction"), SyncEvery: r.SyncEvery}
	peak := csrc.NewPeakMeter(dev)
	if dev.IsCuda() {
		if r.GPU, _, err = csrc.CUDADeviceName(dev); err != nil {
			return err
		}
		mem, _, err := csrc.CUDAMemory(dev)
		if err != nil {
			return err
		}
		r.GPUTotalGiB = gib(mem.Total)
	}
	tps, err := timeGenerate(m, reqs, p, opt, &r.LanpoSlots)
	if err != nil {
		return err
	}
	r.LanpoTokensPerS = tps
	r.LanpoMS = float64(r.Rows*p.MaxNewTokens) / tps * 1000
	r.KVCacheMB = float64(cfg.KVCacheBytes(int64(r.LanpoSlots), r.PromptLen+int64(p.MaxNewTokens), int64(dt.Size()))) / (1 << 20)
	if c.Bool("cuda-graphs") {
		var stats model.GraphStats
		gopt := opt
		gopt.CUDAGraphs, gopt.GraphStats = true, &stats
		var slots int
		if r.GraphsTPS, err = timeGenerate(m, reqs, p, gopt, &slots); err != nil {
			return err
		}
		r.GraphsOverEager = r.GraphsTPS / r.LanpoTokensPerS
		r.GraphWarmUps, r.GraphCaptures, r.GraphReplays = stats.Count("warm-up"), stats.Count("capture"), stats.Count("replay")
	}
	if n := c.Int("timing-tokens"); n > 1 {
		if err := r.timeSteps(m, reqs, p, opt, n); err != nil {
			return err
		}
	}
	if n := c.Int("count-steps"); n > 0 {
		if r.Counts, err = countDecode(cfg, model.LoadOptions{Device: dev, DType: dt}, reqs, p, n); err != nil {
			return err
		}
	}
	if n := c.Int("nocache-steps"); n > 0 && !dev.IsCuda() {
		nc := p
		nc.MaxNewTokens = n
		start := time.Now()
		if _, err := m.GenerateNoCache(reqs, nc); err != nil {
			return err
		}
		r.NoCacheTPS = float64(r.Rows*n) / time.Since(start).Seconds()
	}
	if dev.IsCuda() {
		b, _ := peak.Peak()
		mem, _, err := csrc.CUDAMemory(dev)
		if err != nil {
			return err
		}
		r.LanpoPeakGiB, r.LanpoReservGiB = gib(b), gib(mem.Reserved)
	}
	py := c.String("hf-python")
	r.HFPending = py != ""
	if c.Bool("json") {
		// lanpo's figures first: a baseline that runs out of time or
		// memory loses only its own.
		if err := json.NewEncoder(w).Encode(r); err != nil {
			return err
		}
	} else {
		r.print(w, c)
	}
	if py == "" {
		return nil
	}
	r.HFPending = false
	// The baseline is another process: lanpo's weights, KV cache and the
	// blocks its caching allocator keeps go back to the driver first.
	m.Close()
	if dev.IsCuda() {
		// Tensors not dropped explicitly go with their finalizers.
		runtime.GC()
		runtime.GC()
		if err := csrc.Synchronize(); err != nil {
			return err
		}
		if _, err := csrc.EmptyCUDACache(); err != nil {
			return err
		}
		mem, _, err := csrc.CUDAMemory(dev)
		if err != nil {
			return err
		}
		r.FreeGiBForHF = gib(mem.Free)
	}
	hf, err := bench.RunHFConfig(cfg, prompts, py, bench.HFGenerate, devString(dev), r.DType, fmt.Sprint(info.Threads), fmt.Sprint(r.Samples), fmt.Sprint(p.MaxNewTokens))
	if err != nil {
		r.HFError = err.Error()
	} else {
		r.HF = hf
		var v struct {
			TokensPerS float64 `json:"tokens_per_s"`
		}
		if json.Unmarshal(hf, &v) == nil && v.TokensPerS > 0 {
			r.LanpoOverHF = r.LanpoTokensPerS / v.TokensPerS
		}
	}
	if c.Bool("json") {
		return json.NewEncoder(w).Encode(r)
	}
	r.printHF(w)
	return nil
}

// gib is bytes in GiB.
func gib(b int64) float64 { return float64(b) / (1 << 30) }

// timeGenerate is the output tokens/s of one generation of reqs (prefill
// included); slots receives the rows it decoded at once.
func timeGenerate(m *model.Model, reqs []model.Request, p model.SamplingParams, opt model.GenerateOptions, slots *int) (float64, error) {
	var st model.SlotStats
	opt.Stats = &st
	defer func() { *slots = st.Slots }()
	if err := csrc.Synchronize(); err != nil {
		return 0, err
	}
	start := time.Now()
	out, err := m.Generate(reqs, p, opt)
	if err != nil {
		return 0, err
	}
	if err := csrc.Synchronize(); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range out {
		n += len(s.IDs)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// timeSteps times n decode steps one by one (model.DecodeTiming).
func (r *genBench) timeSteps(m *model.Model, reqs []model.Request, p model.SamplingParams, opt model.GenerateOptions, n int) error {
	var timing model.DecodeTiming
	tp := p
	tp.MaxNewTokens = n
	opt.Timing = &timing
	if _, err := m.Generate(reqs, tp, opt); err != nil {
		return err
	}
	r.TimedSteps = len(timing.Steps)
	for _, s := range timing.Steps {
		r.StepWallMS += s.WallMS
		r.StepLookMS += s.LookMS
		r.StepFwdHostMS += s.ForwardHostMS
		r.StepFwdGPUMS += s.ForwardGPUMS
	}
	if k := float64(r.TimedSteps); k > 0 {
		r.StepWallMS, r.StepLookMS, r.StepFwdHostMS, r.StepFwdGPUMS = r.StepWallMS/k, r.StepLookMS/k, r.StepFwdHostMS/k, r.StepFwdGPUMS/k
		r.HostShare = (r.StepLookMS + r.StepFwdHostMS) / r.StepWallMS
		if r.StepFwdGPUMS > 0 {
			r.LaunchOverGPU = r.StepFwdHostMS / r.StepFwdGPUMS
		}
	}
	return nil
}

// print writes the report as text.
func (r *genBench) print(w io.Writer, c *cli.Context) {
	fmt.Fprintf(w, "  lanpo                   %8.1f tokens/s   %.0f ms, %d rows at once, KV cache %.1f MB, a host look every %d steps\n",
		r.LanpoTokensPerS, r.LanpoMS, r.LanpoSlots, r.KVCacheMB, r.SyncEvery)
	if r.GraphsTPS > 0 {
		fmt.Fprintf(w, "  lanpo, CUDA graphs      %8.1f tokens/s   graphs/eager %.2fx (%d warm-ups, %d captures, %d replays)\n",
			r.GraphsTPS, r.GraphsOverEager, r.GraphWarmUps, r.GraphCaptures, r.GraphReplays)
	}
	if r.TimedSteps > 0 {
		fmt.Fprintf(w, "  decode step (mean of %d) wall %.2f ms: enqueued by the host in %.2f ms, %.2f ms on the GPU, looks %.2f ms; host share %.2f\n",
			r.TimedSteps, r.StepWallMS, r.StepFwdHostMS, r.StepFwdGPUMS, r.StepLookMS, r.HostShare)
	}
	if k := r.Counts; k != nil {
		fmt.Fprintf(w, "  decode step (SDPA, %d steps counted): %.1f kernels and %.1f views per layer, %.1f kernels outside the layers; %.3f host syncs per token (%.3f uploads, %.3f downloads; %.3f async uploads)\n",
			k.Steps, k.KernelsPerLayer, k.ViewsPerLayer, k.KernelsOutside, k.SyncsPerToken, k.UploadsPerToken, k.Downloads, k.AsyncPerToken)
		fmt.Fprintf(w, "    per layer: %s\n", perStep(k.LayerKernels, k.Steps))
		fmt.Fprintf(w, "    outside:   %s\n", perStep(k.OutsideKernels, k.Steps))
	}
	if r.NoCacheTPS > 0 {
		fmt.Fprintf(w, "  lanpo without KV cache  %8.1f tokens/s (first %d steps)   lanpo/no-cache %.1fx\n", r.NoCacheTPS, c.Int("nocache-steps"), r.LanpoTokensPerS/r.NoCacheTPS)
	}
	if r.GPU != "" {
		fmt.Fprintf(w, "  memory: %s, %.1f GiB; lanpo peak %.1f GiB allocated, %.1f GiB reserved\n", r.GPU, r.GPUTotalGiB, r.LanpoPeakGiB, r.LanpoReservGiB)
	}
}

// printHF writes the baseline's line of the report.
func (r *genBench) printHF(w io.Writer) {
	if r.FreeGiBForHF > 0 {
		fmt.Fprintf(w, "  lanpo's model released: %.1f GiB of the GPU free for transformers\n", r.FreeGiBForHF)
	}
	switch {
	case r.HFError != "":
		fmt.Fprintf(w, "  transformers            unavailable: %s\n", r.HFError)
	case r.HF != nil:
		fmt.Fprintf(w, "  transformers generate() lanpo/transformers %.2fx   %s\n", r.LanpoOverHF, r.HF)
	}
}

// perStep lists kernels by name, divided by steps, most frequent first.
func perStep(byName map[string]int64, steps int) string {
	c := csrc.OpCount{ByName: byName}
	var parts []string
	for _, n := range c.Names() {
		parts = append(parts, fmt.Sprintf("%s×%.3g", strings.TrimPrefix(n, "aten::"), float64(byName[n])/float64(steps)))
	}
	return strings.Join(parts, " ")
}
