// Package pool is LANPO's experience pool: the policy's own past attempts
// at training problems with its summaries of them, BM25 retrieval over
// problem texts, near-duplicate detection, the relevance filter's cheap
// scorer (the model-backed ones are in feedback/), and the text of every
// LANPO prompt (reflection, abstraction, summarization, relevance rating).
// It is pure Go: it never touches tensors; feedback/ runs the model and
// hands text and numbers in.
//
// Two rules shape its API:
//   - Reward-agnostic reflection: an Attempt (what a reflection prompt may
//     show) has no outcome field, and AttemptFor chooses it without looking
//     at outcomes, so neither the prompt nor the choice of what it shows
//     can leak whether the attempt was right.
//   - No foreign answers: Lessons hand out only principles and pitfalls,
//     with boxed answers and the other problems' gold answers, where
//     stated as answers, removed — and in a code run (Config.Code) the
//     programs they quote.
//
// Files: entry.go (what the pool stores), pool.go (storage, eviction,
// attempts, lessons), bm25.go (retrieval), dedup.go and dedup_text.go
// (near-duplicates: the same problem reworded), overlap.go (copied text),
// strip.go (answer stripping, summary fields' ends), strip_code.go (code
// stripping, for code runs), prompts.go (prompt text: DefaultPrompts and
// CodePrompts), io.go (save and load).
package pool
