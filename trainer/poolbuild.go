package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/lanpo-rl/lanpo/dist"
	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/rl"
)

// BuildPool makes the experience pool LANPO's loop would have made from a
// run's logged rollouts (RUN_DIR/rollouts/step-NNNNNN.jsonl, log.rollouts)
// — any run's, GRPO's too — with the model in modelDir as the summarizer:
// step by step, the same seeded choice of rollouts per group and the same
// summaries, answer stripping and bounds as lanpo train (cfg's lanpo
// section and prompts; cfg.Data.Train holds the run's problems). What
// differs from a LANPO run's own pool: one model writes every summary (in
// a LANPO run, the policy at each step does). lanpo demo uses it for
// GRPO's own pool, a control of what LANPO's pool is worth (docs/demo.md);
// lanpo pool build is the command.
func BuildPool(cfg Config, modelDir, rolloutsDir string) (*pool.Pool, error) {
	if err := cfg.Resolve(); err != nil {
		return nil, ConfigError{err}
	}
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	problems, err := ReadProblems(cfg.Data.Train, cfg.Data)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(problems))
	for i, p := range problems {
		index[p.ID] = i
	}
	steps, err := filepath.Glob(filepath.Join(rolloutsDir, "step-*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s: no step-NNNNNN.jsonl (a run writes them with log.rollouts: true)", rolloutsDir)
	}
	sort.Strings(steps)
	m, err := model.Load(modelDir, cfg.LoadOptions())
	if err != nil {
		return nil, err
	}
	defer m.Close()
	tk, err := tokenizer.Load(modelDir)
	if err != nil {
		return nil, err
	}
	if cfg.ChatFormat != "" {
		if err := tk.SetChatFormat(cfg.ChatFormat); err != nil {
			return nil, fmt.Errorf("config key chat_format: %w", err)
		}
	}
	ex, err := feedback.NewExplorer(m, tk, cfg.FeedbackSettings(), feedback.Run{Problems: problems,
		SamplesPerPrompt: cfg.Rollout.SamplesPerPrompt, Comm: dist.Single()})
	if err != nil {
		return nil, err
	}
	for _, path := range steps {
		var step int
		if _, err := fmt.Sscanf(filepath.Base(path), "step-%d.jsonl", &step); err != nil || step < 1 {
			return nil, fmt.Errorf("%s: not a step's rollouts (step-NNNNNN.jsonl)", path)
		}
		rolls, err := readRolloutLog(path, index, tk)
		if err != nil {
			return nil, err
		}
		if _, err := ex.Observe(step-1, rolls, noPhases{}); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return ex.Pool(), nil
}

// readRolloutLog reads one step's rollout log into the rollouts an
// explorer observes, groups whole and in order. A line's problem must be
// one of the run's (index); a log without token counts has them counted
// again with tk.
func readRolloutLog(path string, index map[string]int, tk *tokenizer.Tokenizer) ([]*rl.Rollout, error) {
	lines, err := jsonl.Read[rolloutLine](path)
	if err != nil {
		return nil, err
	}
	prompts := map[int]*rl.Prompt{}
	out := make([]*rl.Rollout, len(lines))
	for i, l := range lines {
		k, ok := index[l.ProblemID]
		if !ok {
			return nil, fmt.Errorf("%s:%d: problem %q is not in data.train", path, i+1, l.ProblemID)
		}
		p, ok := prompts[l.Group]
		if !ok {
			p = &rl.Prompt{Problem: k, Index: l.Group, Mode: l.Mode}
			prompts[l.Group] = p
		}
		tokens := l.Tokens
		if tokens == 0 { // a log written before it recorded them
			ids, err := tk.Encode(strings.ToValidUTF8(l.Response, "\uFFFD"), false)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
			}
			tokens = len(ids)
		}
		out[i] = &rl.Rollout{Prompt: p, Sample: l.Sample, Text: l.Response, Tokens: tokens, Reward: l.Reward, Correct: l.Correct, Truncated: l.Truncated}
	}
	return out, nil
}

// noPhases times nothing.
type noPhases struct{}

func (noPhases) Enter(string) {}

// WritePool writes p to path (a pool.jsonl another run's lanpo.initial_pool
// or lanpo eval --pool reads).
func WritePool(p *pool.Pool, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := p.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
