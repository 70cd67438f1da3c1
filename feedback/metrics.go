package feedback

// Metrics are a LANPO step's keys in metrics.jsonl (docs/metrics.md).
type Metrics struct {
	PT                  float64 `json:"lanpo_p_t"`
	Prompts             int     `json:"lanpo_prompts"`
	FeedbackAware       int     `json:"lanpo_feedback_aware"` // drawn feedback-aware
	Reflection          int     `json:"lanpo_reflection"`
	Abstraction         int     `json:"lanpo_abstraction"`
	Fallback            int     `json:"lanpo_fallback_no_material"`  // feedback-aware, nothing in the pool for it
	FallbackNotRelevant int     `json:"lanpo_fallback_not_relevant"` // abstraction drawn, no candidate passed γ
	FallbackTooLong     int     `json:"lanpo_fallback_too_long"`     // the context did not fit the model's context
	AccuracyFeedback    float64 `json:"accuracy_feedback"`           // over rollouts from prompts with context
	AccuracyScratch     float64 `json:"accuracy_scratch"`
	ReflectionCopied    float64 `json:"reflection_copied_answer_frac"` // redo's answer equals the shown attempt's
	ZeroVarFeedback     float64 `json:"zero_variance_frac_feedback"`   // feedback-aware groups whose rewards are all equal
	ZeroVarScratch      float64 `json:"zero_variance_frac_scratch"`
	AllCorrectFeedback  float64 `json:"all_correct_frac_feedback"` // feedback-aware groups all right (saturated)
	AllCorrectScratch   float64 `json:"all_correct_frac_scratch"`
	PoolProblems        int     `json:"pool_problems"`
	PoolEntries         int     `json:"pool_entries"`
	PoolBytes           int64   `json:"pool_bytes"`
	PoolAdded           int     `json:"pool_added"`
	PoolEvicted         int     `json:"pool_evicted"`
	Candidates          int     `json:"retrieval_candidates"`
	Passed              int     `json:"retrieval_passed"`   // relevance ≥ γ
	RelevanceMean       float64 `json:"relevance_mean"`     // on lanpo.similarity_scale
	RawRelevanceMean    float64 `json:"relevance_raw_mean"` // the scorer's own values
	SummaryEmptyFields  int     `json:"summary_empty_fields"`
	SummaryFieldsCut    int     `json:"summary_fields_cut"`      // fields ended where the model began another field in its own words
	AttemptsCut         int     `json:"reflection_attempts_cut"` // reflected attempts shown as beginning + end (lanpo.max_attempt_tokens or the context)
	ContextTokensMean   float64 `json:"context_tokens_mean"`
	ContextTokensMax    int     `json:"context_tokens_max"`
	ContextTruncated    int     `json:"context_truncated"` // plans, lessons and summarizer inputs cut to lanpo.max_context_tokens
	SpecialRemoved      int     `json:"special_tokens_removed"`

	contextSum      int
	relevanceSum    float64
	rawRelevanceSum float64
}
