package eval

import (
	"runtime"
	"slices"
	"sort"

	"github.com/lanpo-rl/lanpo/csrc"
	"github.com/lanpo-rl/lanpo/model"
	"github.com/lanpo-rl/lanpo/model/tokenizer"
	"github.com/lanpo-rl/lanpo/reward"
)

// LevelAccuracy is greedy accuracy on one difficulty level.
type LevelAccuracy struct {
	Level    int     `json:"level"`
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Worked   int     `json:"worked"` // answers that show column steps (ShowsSteps)
}

// Completion is one evaluated answer.
type Completion struct {
	Level   int    `json:"level"`
	Problem string `json:"problem"`
	Gold    string `json:"gold"`
	Output  string `json:"output"`
	Correct bool   `json:"correct"`
}

// Result is an evaluation of one model on a held-out set.
type Result struct {
	Levels      []LevelAccuracy `json:"levels"`
	Overall     float64         `json:"overall"`
	Worked      int             `json:"worked"` // answers that show column steps, all levels
	Completions []Completion    `json:"completions"`
}

// Greedy answers every item greedily (temperature 0) and verifies it;
// prompt renders an item as the chat the model sees.
func Greedy(m *model.Model, tk *tokenizer.Tokenizer, items []Item, prompt func(Item) []tokenizer.Message, maxNew, batch int) (Result, error) {
	runtime.LockOSThread() // torch work on one thread (CONTRIBUTING.md, Threads)
	defer runtime.UnlockOSThread()
	eos, err := m.EOSTokenIDs()
	if err != nil {
		return Result{}, err
	}
	var res Result
	byLevel := map[int]*LevelAccuracy{}
	for part := range slices.Chunk(items, batch) {
		reqs := make([]model.Request, len(part))
		for i, it := range part {
			ids, err := tk.ChatIDs(prompt(it), tokenizer.ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				return res, err
			}
			reqs[i] = model.Request{PromptIDs: tokenizer.Int64s(ids), Samples: 1}
		}
		var out []model.Sample
		err := csrc.NoGrad(func() (err error) {
			out, err = m.Generate(reqs, model.SamplingParams{Temperature: 0, MaxNewTokens: maxNew, StopIDs: eos}, model.GenerateOptions{})
			return err
		})
		if err != nil {
			return res, err
		}
		for i, s := range out {
			it := part[i]
			text := tk.Decode(tokenizer.Ints(s.IDs), true)
			ok := reward.Verify(text, it.Answer, reward.Options{}).Correct
			res.Completions = append(res.Completions, Completion{Level: it.Level, Problem: it.Problem, Gold: it.Answer, Output: text, Correct: ok})
			la := byLevel[it.Level]
			if la == nil {
				la = &LevelAccuracy{Level: it.Level}
				byLevel[it.Level] = la
			}
			la.N++
			if ok {
				la.Correct++
			}
			if ShowsSteps(text) {
				la.Worked++
			}
		}
	}
	total, correct := 0, 0
	for _, la := range byLevel {
		la.Accuracy = float64(la.Correct) / float64(la.N)
		res.Levels = append(res.Levels, *la)
		total += la.N
		correct += la.Correct
		res.Worked += la.Worked
	}
	sort.Slice(res.Levels, func(i, j int) bool { return res.Levels[i].Level < res.Levels[j].Level })
	if total > 0 {
		res.Overall = float64(correct) / float64(total)
	}
	return res, nil
}
