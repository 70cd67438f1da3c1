// Package seed is lanpo seed: SFT data that teaches LANPO's skills
// (answering, summarizing, reflecting, condensing a plan and solving with
// it) written with the training run's own prompts (feedback.Builder) by
// the model itself or a teacher, kept only when the verifier and format
// checks accept it (seed.go: the run, its state and resume; skills.go:
// each skill's generation and filters; build.go: the chats). Nothing here
// runs during training.
package seed
