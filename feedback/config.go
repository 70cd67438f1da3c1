package feedback

import (
	"fmt"
	"math"

	"github.com/lanpo-rl/lanpo/pool"
)

// Config is the lanpo: section (algo.name: lanpo). Defaults and why
// are in Default; docs/lanpo.md describes each choice.
type Config struct {
	// FeedbackRatio is p_t: the probability that a prompt is
	// feedback-aware (0.75: the design card's "best", 1.0 said to collapse;
	// no source in the paper's text or reviews, docs/lanpo.md). With
	// FeedbackSchedule linear it grows from 0 to FeedbackRatio over
	// FeedbackWarmupSteps.
	FeedbackRatio       float64 `yaml:"feedback_ratio"`
	FeedbackSchedule    string  `yaml:"feedback_schedule"` // constant or linear
	FeedbackWarmupSteps int     `yaml:"feedback_warmup_steps"`
	// Modes weigh the two kinds of feedback among the modes available for
	// a prompt. Unset: reflection 1 and abstraction 1 (abstraction only
	// with train_prompt: original).
	Modes Modes `yaml:"modes"`
	// ReflectOn: any (default) picks the attempt to show without looking
	// at its outcome; failed shows only failed attempts — what the
	// paper's summaries speak of, but being shown then tells the model the
	// attempt was wrong.
	ReflectOn string `yaml:"reflect_on"`
	// LessonOrder: which of a related problem's pool entries abstraction
	// reads first (LessonsPerProblem of them). recency (default): newest
	// first, whatever their outcome; outcome: entries of verified-correct
	// attempts first (newest first), then the rest newest first — a related
	// problem's solved lesson reaches the condenser before its failed ones.
	// Our choice, not the paper's (docs/lanpo.md); reflection is not
	// affected (reflect_on decides what it shows).
	LessonOrder string `yaml:"lesson_order"`
	// Context is what an abstraction prompt gives the solver: plan
	// (default) — the policy condenses the related problems' lessons into a
	// plan first (our reading of the paper's summarization, DESIGN.md) — or
	// lessons: the related problems' principles and pitfalls themselves,
	// with an instruction to work out which apply before solving, and no
	// condenser call (the other reading: the pool's entries are already
	// summaries, and the rollout RL reinforces does the analysis).
	Context string `yaml:"context"`
	// TrainPrompt: sampled (default) trains each sample as an answer to the
	// prompt it was sampled from (on-policy); original trains
	// feedback-guided samples as answers to the problem alone, with
	// truncated importance weights min(π_old(y|x)/μ(y|x,c), TISCap)
	// against the sampler's log-probs (the behaviour policy μ saw the
	// context). Reflection is not used with original.
	TrainPrompt string  `yaml:"train_prompt"`
	TISCap      float64 `yaml:"tis_cap"`
	// Consolidate is λ of consolidation (after Experiential RL, arXiv
	// 2602.13949): every verified-correct response sampled with feedback
	// in context (either mode) is also trained as the answer to the bare
	// problem with a token-mean NLL, λ·NLL added to the policy loss — so a
	// rule found with help becomes the policy's without help, even where
	// its group is all-correct (no advantage) or its importance weights are
	// truncated (train_prompt: original). 0 (default): off, the update is
	// the plain LANPO one.
	Consolidate float64 `yaml:"consolidate"`
	// ConsolidateLR > 0 gives consolidation an optimizer step of its own,
	// after the policy's, at this learning rate (following optim's
	// schedule), with AdamW moments of its own (a moment group: the policy's
	// moments never see its gradient) — the dose of a found lesson set
	// apart from GRPO's. Under Adam a step's size does not follow its
	// loss's scale, so there λ weighs nothing but the NLL's gradient
	// against optim.grad_clip; what sets the dose is this rate. 0
	// (default): λ·NLL joins the policy's step, as its share of one
	// gradient. docs/lanpo.md, "Consolidation".
	ConsolidateLR float64 `yaml:"consolidate_lr"`
	// ConsolidateNorm is how λ weighs the consolidated tokens: step
	// (default) — λ over all of the step's consolidated tokens, a fixed
	// total however few they are — or token: each consolidated token weighs
	// λ times a policy token, the rows joining the policy loss's
	// normalization (algo.loss_agg_mode over both), so the term's total
	// weight grows with how much was found. docs/lanpo.md, "Consolidation".
	ConsolidateNorm string `yaml:"consolidate_norm"`
	// Similarity is the relevance filter's scorer: embedding (cosine of
	// centred mean-pooled hidden states of the policy; default), policy (the
	// policy rates relevance 0-9, read from its digit probabilities) or bm25
	// (normalized BM25, cheap). SimilarityThreshold is γ, on the scale
	// SimilarityScale says: quantile (default) — a candidate's relevance is
	// the share of ReferencePairs random pairs of pool problems it outscores
	// under the same scorer, so γ = 0.9 means "more related than 90% of
	// random pairs" whatever the scorer and model — or raw (the scorer's own
	// [0, 1] value).
	Similarity          string  `yaml:"similarity"`
	SimilarityThreshold float64 `yaml:"similarity_threshold"`
	SimilarityScale     string  `yaml:"similarity_scale"`
	ReferencePairs      int     `yaml:"reference_pairs"`
	// RelevanceFloor is the least raw score (the scorer's own [0, 1]
	// value) a candidate needs besides γ: an absolute "related at all".
	// Unset: the scorer's calibrated default (relevanceFloors;
	// docs/lanpo.md has the measurement).
	RelevanceFloor *float64 `yaml:"relevance_floor"`
	// EmbeddingCentre is what the embedding scorer subtracts before the
	// cosine: fixed (default) — the mean embedding of a fixed set of 56
	// MATH problems of every subject (feedback/relevance_centre.jsonl), so
	// raw scores and relevance_floor mean the same in any run — or batch,
	// the mean of the texts scored together (the pool's own mix: in a pool
	// of one kind of problem every score is then low).
	EmbeddingCentre string `yaml:"embedding_centre"`
	// RetrievalCandidates other problems come from BM25; of those passing
	// γ, the MaxRelatedProblems most relevant give LessonsPerProblem
	// lessons each to the condenser.
	RetrievalCandidates int `yaml:"retrieval_candidates"`
	MaxRelatedProblems  int `yaml:"max_related_problems"`
	LessonsPerProblem   int `yaml:"lessons_per_problem"`
	// Pool bounds (pool.Config).
	MaxEntriesPerProblem int    `yaml:"max_entries_per_problem"`
	MaxPoolBytes         int64  `yaml:"max_pool_bytes"`
	Eviction             string `yaml:"eviction"`
	// MaxAttemptChars caps the attempt the pool stores, in characters; 0:
	// 16 per rollout.max_new_tokens token, so a whole attempt is kept (what
	// a prompt shows of it is MaxAttemptTokens' business).
	MaxAttemptChars int     `yaml:"max_attempt_chars"`
	NearDuplicate   float64 `yaml:"near_duplicate_threshold"`
	// SummariesPerGroup trajectories of each group are stored and
	// summarized after each step, each field in at most SummaryFieldTokens.
	SummariesPerGroup  int `yaml:"summaries_per_group"`
	SummaryFieldTokens int `yaml:"summary_field_tokens"`
	PlanTokens         int `yaml:"plan_tokens"`
	// MaxAttemptTokens is how much of an earlier attempt a reflection
	// prompt shows, in training and in lanpo eval's self-correct mode alike
	// (one rule: Builder.attemptText); 0: rollout.max_new_tokens, the whole
	// attempt. Where the prompt would not leave the generation budget in
	// the model's context, less is shown; a longer attempt keeps its
	// beginning and its end around a marker.
	MaxAttemptTokens int `yaml:"max_attempt_tokens"`
	// MaxContextTokens bounds the other model-written text a prompt gets:
	// the plan, and the summarizer's and condenser's inputs.
	MaxContextTokens int `yaml:"max_context_tokens"`
	// AuxTemperature samples summaries, plans (0: greedy).
	AuxTemperature float64 `yaml:"aux_temperature"`
	// Prompts is a YAML file overriding the prompt texts (pool.Prompts).
	Prompts string `yaml:"prompts"`
	// InitialPool is a pool.jsonl to start a fresh run from.
	InitialPool string `yaml:"initial_pool"`
	// Code is set for a code run (reward.kind: code) by the trainer's
	// config loading, never by the user (no YAML key: it follows the
	// reward). With it the prompts are pool.CodePrompts (lanpo.prompts
	// overrides apply over them), and lessons, plans and stored summaries
	// lose their code as well as their answers (pool.StripCode). Here rather
	// than in Settings so that every pool built from PoolConfig, and lanpo
	// seed's renderer, follow it too.
	Code bool `yaml:"-"`
}

// Modes weigh the feedback modes; nil: the default.
type Modes struct {
	Reflection  *float64 `yaml:"reflection"`
	Abstraction *float64 `yaml:"abstraction"`
}

// LANPO's option values.
const (
	scheduleConstant = "constant"
	scheduleLinear   = "linear"
	reflectAny       = "any"
	reflectFailed    = "failed"
	orderRecency     = "recency"
	orderOutcome     = "outcome"
	contextPlan      = "plan"
	contextLessons   = "lessons"
	trainSampled     = "sampled"
	trainOriginal    = "original"
	simPolicy        = "policy"
	simBM25          = "bm25"
	simEmbedding     = "embedding"
	scaleQuantile    = "quantile"
	scaleRaw         = "raw"
	normStep         = "step"
	normToken        = "token"
	centreFixed      = "fixed"
	centreBatch      = "batch"
)

// relevanceFloors are the scorers' default lanpo.relevance_floor, set
// from lanpo bench relevance on BM25-retrieved MATH-train candidates with
// Qwen2.5-Coder-0.5B and from a real run's candidates (docs/lanpo.md, "An
// absolute floor" and "One centre for every run"): embedding 0.5 (fixed
// centre) passes 89% of same-subject and 67% of other-subject candidates
// (BM25's candidates are look-alikes: other-subject is a weak proxy for
// unrelated), the real run's same-kind candidates (raw 0.56-0.74) and not
// the pair behind the real run's collapsed plan (0.39); bm25 0.7 passes
// 16–25% and 2%. The policy scorer is not calibrated (a 0.5B model rates
// worse than chance): no floor.
var relevanceFloors = map[string]float64{simEmbedding: 0.5, simBM25: 0.7, simPolicy: 0}

// attemptCharsPerToken sizes the pool's attempt cap: byte-level BPE
// tokens of math text average 3–4 characters; 16 leaves room for long
// tokens (whitespace runs, code) so a whole attempt is stored.
const attemptCharsPerToken = 16

// Default is the section's defaults.
func Default() Config {
	pc := pool.DefaultConfig()
	return Config{
		FeedbackRatio: 0.75, FeedbackSchedule: scheduleConstant, ReflectOn: reflectAny, TrainPrompt: trainSampled, TISCap: 2,
		Similarity: simEmbedding, EmbeddingCentre: centreFixed, SimilarityThreshold: 0.9, SimilarityScale: scaleQuantile, ReferencePairs: 64, RetrievalCandidates: 8, MaxRelatedProblems: 3, LessonsPerProblem: 2,
		MaxEntriesPerProblem: pc.MaxEntriesPerProblem, MaxPoolBytes: pc.MaxBytes, Eviction: pc.Eviction,
		NearDuplicate:     pc.NearDuplicate,
		SummariesPerGroup: 2, SummaryFieldTokens: 64, PlanTokens: 128, MaxContextTokens: 1024,
	}
}

// PoolConfig is the pool's part of the section.
func (l Config) PoolConfig() pool.Config {
	return pool.Config{MaxEntriesPerProblem: l.MaxEntriesPerProblem, MaxBytes: l.MaxPoolBytes, Eviction: l.Eviction,
		MaxAttemptChars: l.MaxAttemptChars, NearDuplicate: l.NearDuplicate, Code: l.Code}
}

// GivesLessons reports whether abstraction shows the solver the lessons
// themselves (lanpo.context: lessons) rather than a condensed plan.
func (l Config) GivesLessons() bool { return l.Context == contextLessons }

// feedbackRatio is p_t at a step.
func (l Config) feedbackRatio(step int) float64 {
	if l.FeedbackSchedule == scheduleLinear && step < l.FeedbackWarmupSteps {
		return l.FeedbackRatio * float64(step) / float64(l.FeedbackWarmupSteps)
	}
	return l.FeedbackRatio
}

// Resolve fills the defaults that depend on other settings: the relevance
// floor of the scorer, the attempt caps from rollout.max_new_tokens. It
// fills only what is unset, so it may run more than once. Every entry
// point reaches it through trainer's Config.Resolve (which calls Validate);
// NewBuilder calls it too, for Settings built by hand (eval.Run from Go).
func (l *Config) Resolve(maxNewTokens int) {
	if l.RelevanceFloor == nil {
		floor := relevanceFloors[l.Similarity]
		l.RelevanceFloor = &floor
	}
	if l.EmbeddingCentre == "" {
		l.EmbeddingCentre = centreFixed
	}
	if l.LessonOrder == "" {
		l.LessonOrder = orderRecency
	}
	if l.Context == "" {
		l.Context = contextPlan
	}
	if l.ConsolidateNorm == "" {
		l.ConsolidateNorm = normStep
	}
	if l.MaxAttemptTokens == 0 {
		l.MaxAttemptTokens = maxNewTokens
	}
	if l.MaxAttemptChars == 0 {
		l.MaxAttemptChars = attemptCharsPerToken * maxNewTokens
	}
}

// Validate checks the section (rollout.max_new_tokens sets its default
// attempt caps) and fills the defaults Resolve fills and the mode weights.
func (l *Config) Validate(maxNewTokens int) error {
	bad := func(key string, format string, args ...any) error {
		return fmt.Errorf("config key lanpo.%s: %s", key, fmt.Sprintf(format, args...))
	}
	weight := func(w *float64, def float64) float64 {
		if w == nil {
			return def
		}
		return *w
	}
	l.Resolve(maxNewTokens)
	switch {
	case l.MaxAttemptTokens < 1:
		return bad("max_attempt_tokens", "must be ≥ 1 (0: rollout.max_new_tokens), got %d", l.MaxAttemptTokens)
	case l.FeedbackRatio < 0 || l.FeedbackRatio > 1:
		return bad("feedback_ratio", "must be in [0, 1], got %g", l.FeedbackRatio)
	case l.FeedbackSchedule != scheduleConstant && l.FeedbackSchedule != scheduleLinear:
		return bad("feedback_schedule", "%q: want %s or %s", l.FeedbackSchedule, scheduleConstant, scheduleLinear)
	case l.FeedbackSchedule == scheduleLinear && l.FeedbackWarmupSteps < 1:
		return bad("feedback_warmup_steps", "must be ≥ 1 with feedback_schedule: linear")
	case l.ReflectOn != reflectAny && l.ReflectOn != reflectFailed:
		return bad("reflect_on", "%q: want %s or %s", l.ReflectOn, reflectAny, reflectFailed)
	case l.LessonOrder != orderRecency && l.LessonOrder != orderOutcome:
		return bad("lesson_order", "%q: want %s or %s", l.LessonOrder, orderRecency, orderOutcome)
	case l.Context != contextPlan && l.Context != contextLessons:
		return bad("context", "%q: want %s or %s", l.Context, contextPlan, contextLessons)
	case l.TrainPrompt != trainSampled && l.TrainPrompt != trainOriginal:
		return bad("train_prompt", "%q: want %s or %s", l.TrainPrompt, trainSampled, trainOriginal)
	case l.TISCap < 1:
		return bad("tis_cap", "must be ≥ 1, got %g", l.TISCap)
	case !(l.Consolidate >= 0) || math.IsInf(l.Consolidate, 0):
		return bad("consolidate", "must be a finite λ ≥ 0 (0: off), got %g", l.Consolidate)
	case !(l.ConsolidateLR >= 0) || math.IsInf(l.ConsolidateLR, 0):
		return bad("consolidate_lr", "must be a finite learning rate ≥ 0 (0: consolidation joins the policy's step), got %g", l.ConsolidateLR)
	case l.ConsolidateNorm != normStep && l.ConsolidateNorm != normToken:
		return bad("consolidate_norm", "%q: want %s or %s", l.ConsolidateNorm, normStep, normToken)
	case l.ConsolidateNorm == normToken && l.ConsolidateLR > 0:
		return bad("consolidate_norm", "token joins the policy's step; lanpo.consolidate_lr gives consolidation a step of its own: choose one")
	case l.ConsolidateLR > 0 && l.Consolidate == 0:
		return bad("consolidate_lr", "%g needs lanpo.consolidate > 0 (consolidation is off)", l.ConsolidateLR)
	case l.Similarity != simPolicy && l.Similarity != simBM25 && l.Similarity != simEmbedding:
		return bad("similarity", "%q: want %s, %s or %s", l.Similarity, simPolicy, simBM25, simEmbedding)
	case l.SimilarityThreshold < 0 || l.SimilarityThreshold > 1:
		return bad("similarity_threshold", "must be in [0, 1], got %g", l.SimilarityThreshold)
	case *l.RelevanceFloor < 0 || *l.RelevanceFloor > 1:
		return bad("relevance_floor", "must be in [0, 1], got %g", *l.RelevanceFloor)
	case l.EmbeddingCentre != centreFixed && l.EmbeddingCentre != centreBatch:
		return bad("embedding_centre", "%q: want %s or %s", l.EmbeddingCentre, centreFixed, centreBatch)
	case l.SimilarityScale != scaleQuantile && l.SimilarityScale != scaleRaw:
		return bad("similarity_scale", "%q: want %s or %s", l.SimilarityScale, scaleQuantile, scaleRaw)
	case l.SimilarityScale == scaleQuantile && l.ReferencePairs < 8:
		return bad("reference_pairs", "must be ≥ 8 with similarity_scale: quantile, got %d", l.ReferencePairs)
	case l.RetrievalCandidates < 1 || l.MaxRelatedProblems < 1 || l.LessonsPerProblem < 1:
		return bad("retrieval_candidates", "retrieval_candidates, max_related_problems and lessons_per_problem must be ≥ 1")
	case l.SummariesPerGroup < 0:
		return bad("summaries_per_group", "must be ≥ 0")
	case l.SummaryFieldTokens < 1 || l.PlanTokens < 1 || l.MaxContextTokens < 16:
		return bad("max_context_tokens", "summary_field_tokens and plan_tokens must be ≥ 1, max_context_tokens ≥ 16")
	case l.AuxTemperature < 0:
		return bad("aux_temperature", "must be ≥ 0")
	}
	if err := l.PoolConfig().Validate(); err != nil {
		return fmt.Errorf("config key lanpo: %w", err)
	}
	refl := weight(l.Modes.Reflection, 1)
	if l.TrainPrompt == trainOriginal {
		if l.Modes.Reflection != nil && *l.Modes.Reflection > 0 {
			return bad("modes.reflection", "must be 0 with train_prompt: original (a critique trained without the attempt it critiques teaches nothing)")
		}
		refl = 0
	}
	abst := weight(l.Modes.Abstraction, 1)
	if refl < 0 || abst < 0 || refl+abst == 0 {
		return bad("modes", "weights must be ≥ 0 and not both 0 (reflection %g, abstraction %g)", refl, abst)
	}
	l.Modes.Reflection, l.Modes.Abstraction = &refl, &abst
	return nil
}

// ConsolidatePerToken reports whether consolidated tokens join the policy
// loss's normalization (lanpo.consolidate_norm: token).
func (l Config) ConsolidatePerToken() bool { return l.ConsolidateNorm == normToken }
