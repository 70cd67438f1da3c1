package seed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/feedback"
	"github.com/lanpo-rl/lanpo/internal/fsutil"
	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/internal/progress"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/pool"
	"github.com/lanpo-rl/lanpo/reward"
	"github.com/lanpo-rl/lanpo/trainer"
)

// lanpo seed builds the SFT data that teaches LANPO's skills before RL
// (the paper's ~3K examples), from the user's problems, with the model
// itself (self-distillation, the paper's "bootstrapping") or a teacher, and
// keeps only what the verifier and format checks accept:
//
//   - answer: k sampled solutions per problem; kept when the verifier says
//     the final answer is right (rejection sampling).
//   - summarize: the summarization prompt over right and wrong attempts;
//     kept when all three fields are non-empty, none ran out of its token
//     budget, and the summary is not a copy of the attempt.
//   - reflect: the reflection prompt over an attempt (right or wrong, the
//     prompt says neither); kept when the redo verifies correct, balanced
//     so about as many shown attempts were right as wrong (else the model
//     learns that a shown attempt is usually wrong).
//   - abstract: the condensing prompt over lessons retrieved (the trainer's
//     retrieval and relevance filter) from a pool of the other problems'
//     kept summaries, and the solve prompt with the plan; kept when that
//     solve verifies correct.
//
// Gold answers go to the verifier only: no prompt builder receives one, so
// none can appear in a kept prompt (TestSeedNeverShowsGold).

// Options configure a seed run.
type Options struct {
	Config   trainer.Config // prompts, the lanpo section (scorer, γ, budgets), rollout.max_new_tokens/temperature
	Problems []trainer.Problem
	Out      string             // the seed file; Out+".state.json" and Out+".pool.jsonl" beside it
	N        int                // examples wanted in all
	Mix      map[string]float64 // share of each skill (normalized)
	K        int                // answers sampled per problem
	Batch    int                // problems per batch (the unit of resume)
	Resume   bool
	Progress io.Writer
	// Rejected, if set, receives every rejected candidate's chat with the
	// reason ({"example": …, "reason": …} per line), to inspect the filters.
	Rejected io.Writer
	// StopAfterBatches ends the run after that many batches of this
	// invocation (0: run to the end); --resume continues it.
	StopAfterBatches int
}

// Stats counts one skill's candidates and why they were rejected.
type Stats struct {
	Tried    int            `json:"tried"`
	Kept     int            `json:"kept"`
	Target   int            `json:"target"`
	Rejected map[string]int `json:"rejected"`
}

func (s *Stats) reject(why string) {
	if s.Rejected == nil {
		s.Rejected = map[string]int{}
	}
	s.Rejected[why]++
}

// state is what a resumed run needs: batches done and the statistics.
type state struct {
	Batches int               `json:"batches_done"`
	Stats   map[string]*Stats `json:"stats"`
	// Reflect balance: kept reflections whose shown attempt was right/wrong.
	RightShown int `json:"reflect_right_shown"`
	WrongShown int `json:"reflect_wrong_shown"`
}

// Run runs lanpo seed with m as the teacher (the model itself, or a
// stronger one) and tk its tokenizer, and returns the statistics.
func Run(m *model.Model, tk *tokenizer.Tokenizer, o Options) (map[string]*Stats, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	targets, err := targets(o.N, o.Mix)
	if err != nil {
		return nil, err
	}
	if o.K < 1 || o.Batch < 1 {
		return nil, fmt.Errorf("seed: k and batch must be ≥ 1")
	}
	st, p, err := o.openState(targets)
	if err != nil {
		return nil, err
	}
	f, err := feedback.NewBuilder(m, tk, o.Config.FeedbackSettings(), p)
	if err != nil {
		return nil, err
	}
	b, err := NewBuilder(o.Config, tk)
	if err != nil {
		return nil, err
	}
	if err := checkFit(f, o.Problems); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(o.Out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	scorer, err := trainer.NewScorer(o.Config)
	if err != nil {
		return nil, err
	}
	defer scorer.Close()
	s := &seeder{m: m, tk: tk, f: f, b: b, o: o, st: st, scorer: scorer}
	batches := (len(o.Problems) + o.Batch - 1) / o.Batch
	bar := progress.New(o.Progress, "seed", batches, st.Batches)
	startBatch := st.Batches
	for bi := st.Batches; bi < batches && !s.done(); bi++ {
		if o.StopAfterBatches > 0 && bi-startBatch == o.StopAfterBatches {
			break
		}
		lo, hi := bi*o.Batch, min((bi+1)*o.Batch, len(o.Problems))
		exs, err := s.batch(bi, o.Problems[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("seed, problems %d-%d: %w", lo+1, hi, err)
		}
		enc := jsonl.Encoder(out)
		for _, e := range exs {
			if err := enc.Encode(e); err != nil {
				return nil, err
			}
		}
		if err := out.Sync(); err != nil {
			return nil, err
		}
		st.Batches = bi + 1
		if err := o.saveState(st, p); err != nil {
			return nil, err
		}
		bar.Update(st.Batches, s.line())
		if o.Progress == nil {
			log.Info().Int("batch", bi+1).Int("of", batches).Str("kept", s.line()).Msg("seed")
		}
	}
	bar.Done(s.line())
	return st.Stats, nil
}

// targets splits n examples over the skills by the mix.
func targets(n int, mix map[string]float64) (map[string]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("--n must be ≥ 1")
	}
	total := 0.0
	for k, w := range mix {
		if !slices.Contains(Skills, k) || w < 0 {
			return nil, fmt.Errorf("--mix %s=%g: want skills %s with weights ≥ 0", k, w, strings.Join(Skills, ", "))
		}
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("--mix: all weights are 0")
	}
	out := map[string]int{}
	for _, k := range Skills {
		out[k] = int(math.Round(float64(n) * mix[k] / total))
	}
	return out, nil
}

// openState starts or resumes a run: with Resume, the state and pool files
// say how far it got; the seed file is cut back to the examples of the
// batches done (a batch cut short by a kill is run again).
func (o Options) openState(targets map[string]int) (*state, *pool.Pool, error) {
	st := &state{Stats: map[string]*Stats{}}
	for _, k := range Skills {
		st.Stats[k] = &Stats{Target: targets[k]}
	}
	pc := o.Config.LANPO.PoolConfig()
	statePath, poolPath := o.Out+".state.json", o.Out+".pool.jsonl"
	_, err := os.Stat(o.Out)
	exists := err == nil
	if exists && !o.Resume {
		return nil, nil, fmt.Errorf("%s exists: pass --resume to continue it, or choose another --out", o.Out)
	}
	if !exists || !o.Resume {
		// The output's directory is made as any writer of a file would
		// (docs/recipe.md writes into runs/recipe-seed/).
		if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
			return nil, nil, err
		}
		p, err := pool.New(pc)
		return st, p, err
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		return nil, nil, fmt.Errorf("--resume: %w", err)
	}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", statePath, err)
	}
	for _, k := range Skills {
		if st.Stats[k] == nil || st.Stats[k].Target != targets[k] {
			return nil, nil, fmt.Errorf("--resume: %s was made with other --n/--mix targets (%s)", o.Out, k)
		}
	}
	p, err := pool.New(pc)
	if st.Batches > 0 {
		p, err = pool.Load(poolPath, pc)
	}
	if err != nil {
		return nil, nil, err
	}
	kept := 0
	for _, k := range Skills {
		kept += st.Stats[k].Kept
	}
	exs, err := jsonl.Read[Example](o.Out)
	if err != nil && kept > 0 {
		return nil, nil, err
	}
	if len(exs) < kept {
		return nil, nil, fmt.Errorf("--resume: %s has %d examples, its state says %d", o.Out, len(exs), kept)
	}
	if err := jsonl.WriteFile(o.Out, exs[:kept]); err != nil {
		return nil, nil, err
	}
	log.Info().Int("batches", st.Batches).Int("examples", kept).Msg("resuming seed")
	return st, p, nil
}

func (o Options) saveState(st *state, p *pool.Pool) error {
	var buf strings.Builder
	if err := p.Write(&buf); err != nil {
		return err
	}
	if err := fsutil.WriteFileSync(o.Out+".pool.jsonl", []byte(buf.String())); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(st, "", "  ")
	return fsutil.WriteFileSync(o.Out+".state.json", append(js, '\n'))
}

// seeder runs batches.
type seeder struct {
	m    *model.Model
	tk   *tokenizer.Tokenizer
	f    *feedback.Builder // the trainer's prompts: reflection, plans, summaries
	b    *Builder          // the seed chats
	o    Options
	st   *state
	step int // the batch: keys every random stream
	// scorer is the run's reward kind (nil: the math verifier), which
	// decides which attempts count as right.
	scorer reward.Scorer
}

// correct reports whether the reward kind counts text, a response to pr
// (cut: at the token limit), as solving it.
func (s *seeder) correct(pr trainer.Problem, text string, cut bool) (bool, error) {
	sc := s.scorer
	if sc == nil {
		sc = reward.Math{}
	}
	vs, err := reward.ScoreChecked(context.Background(), sc, []reward.Request{{Problem: pr.Record, ID: pr.ID, Answer: pr.Answer, Response: text, Truncated: cut}},
		func(int) string { return pr.Where })
	if err != nil {
		return false, fmt.Errorf("reward: problem %s: %w", pr.ID, err)
	}
	return vs[0].Correct, nil
}

func (s *seeder) done() bool {
	for _, k := range Skills {
		if st := s.st.Stats[k]; st.Kept < st.Target {
			return false
		}
	}
	return true
}

func (s *seeder) want(skill string) bool { st := s.st.Stats[skill]; return st.Kept < st.Target }

func (s *seeder) line() string {
	var parts []string
	for _, k := range Skills {
		st := s.st.Stats[k]
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, st.Kept, st.Target))
	}
	return strings.Join(parts, ", ")
}

// decide keeps e (why == "") unless its skill has enough, or rejects it
// for why; rejected chats go to Options.Rejected. It reports whether e was
// kept.
func (s *seeder) decide(out *[]Example, e Example, why string) bool {
	st := s.st.Stats[e.Skill]
	st.Tried++
	if why == "" && st.Kept >= st.Target {
		why = "target reached"
	}
	if why != "" {
		st.reject(why)
		if s.o.Rejected != nil {
			jsonl.Encoder(s.o.Rejected).Encode(struct {
				Example Example `json:"example"`
				Reason  string  `json:"reason"`
			}{e, why})
		}
		return false
	}
	st.Kept++
	*out = append(*out, e)
	return true
}

// checkFit refuses, before anything is generated or written, problems
// whose answer prompt and rollout.max_new_tokens exceed the model's
// context, naming the first ones (a run used to stop in its first batch
// and leave an empty --out that the next run refused to overwrite).
func checkFit(f *feedback.Builder, problems []trainer.Problem) error {
	var long []string
	for _, p := range problems {
		n, fits, err := f.SolveFits(p.Problem)
		if err != nil {
			return fmt.Errorf("%s: problem %s: %w", p.Where, p.ID, err)
		}
		if !fits {
			long = append(long, fmt.Sprintf("%s (%s, %d prompt tokens)", p.ID, p.Where, n))
		}
	}
	if len(long) == 0 {
		return nil
	}
	return f.TooLong(long, "lower --max-new-tokens or leave them out of --data")
}
