// Package pool is LANPO's experience pool: storage of trajectory summaries,
// BM25 retrieval over problem text, the similarity filter, and prompt
// building for relevant abstraction and reward-agnostic reflection. It is
// pure Go and never touches tensors.
//
// The pool lands with the LANPO issue; this file only names the role.
package pool
