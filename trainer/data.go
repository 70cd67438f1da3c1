package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog/log"

	"github.com/lanpo-rl/lanpo/internal/jsonl"
	"github.com/lanpo-rl/lanpo/rl"
)

// Problem is a training problem (rl.Problem).
type Problem = rl.Problem

// LoadProblems reads a JSONL dataset of {"id","problem","answer"} records
// (ReadProblems with the default keys).
func LoadProblems(path string, skipBad bool) ([]Problem, error) {
	return ReadProblems(path, DataConfig{SkipBadLines: skipBad})
}

// Data record keys and answer formats (data.*_key, data.answer_format).
const (
	defaultProblemKey = "problem"
	defaultAnswerKey  = "answer"
	defaultIDKey      = "id"
	AnswerGSM8K       = "gsm8k"
)

// ReadProblems reads a JSONL dataset, taking each record's problem, answer
// and id from data.problem_key, data.answer_key and data.id_key (dotted
// paths into nested records; defaults problem, answer, id). An answer may
// be a string or a JSON number (taken as written: 72, 0.5); with
// data.answer_format gsm8k it is a worked solution ending in "#### 72". A
// record without an id gets file:line. A malformed line, or an id an
// earlier line already used (the pool, the cursor and the logs key
// problems by id: two problems under one id would mix their attempts), is
// an error naming file:line, or, with data.skip_bad_lines, is counted,
// logged and skipped.
func ReadProblems(path string, d DataConfig) ([]Problem, error) {
	keys := d.keys()
	var out []Problem
	skipped := 0
	seen := map[string]int{}
	each, unit := jsonl.File, "%s:%d"
	if strings.HasSuffix(path, ".parquet") {
		each, unit = parquetRows, "%s row %d"
	}
	err := each(path, func(n int, line []byte) error {
		p, err := keys.read(line)
		if first, dup := seen[p.ID]; err == nil && p.ID != "" && dup {
			err = fmt.Errorf("id %q already used on line %d", p.ID, first)
		}
		if err != nil {
			if d.SkipBadLines {
				skipped++
				log.Warn().Str("file", path).Int("line", n).Err(err).Msg("skipping malformed line")
				return nil
			}
			return fmt.Errorf(unit+": %w", path, n, err)
		}
		p.Where = fmt.Sprintf(unit, path, n)
		seen[p.ID] = n
		if p.ID == "" {
			p.ID = p.Where
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no problems (%d malformed lines skipped)", path, skipped)
	}
	if skipped > 0 {
		log.Warn().Str("file", path).Int("skipped", skipped).Int("kept", len(out)).Msg("malformed lines skipped")
	}
	return out, nil
}

// ReadRecord reads one data record (a JSON object) as ReadProblems does,
// with d's keys; the id is "" where the record has none.
func ReadRecord(line []byte, d DataConfig) (Problem, error) {
	return d.keys().read(line)
}

// recordKeys say where a record's fields are.
type recordKeys struct {
	problem, answer, id, answerFormat string
	answerOptional                    bool
}

func (d DataConfig) keys() recordKeys {
	k := recordKeys{d.ProblemKey, d.AnswerKey, d.IDKey, d.AnswerFormat, d.answerOptional}
	if k.problem == "" {
		k.problem = defaultProblemKey
	}
	if k.answer == "" {
		k.answer = defaultAnswerKey
	}
	if k.id == "" {
		k.id = defaultIDKey
	}
	return k
}

// read reads one record.
func (k recordKeys) read(line []byte) (Problem, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var rec map[string]any
	if err := dec.Decode(&rec); err != nil {
		return Problem{}, err
	}
	p := Problem{Record: rec}
	var err error
	if msgs, ok := at(rec, k.problem).([]any); ok {
		if p.Problem, p.System, err = chatProblem(msgs); err != nil {
			return p, fmt.Errorf("%q: %w", k.problem, err)
		}
		p.Chat = true
	} else if p.Problem, err = k.text(rec, k.problem, "data.problem_key", true); err != nil {
		return p, err
	}
	if p.Answer, err = k.text(rec, k.answer, "data.answer_key", !k.answerOptional); err != nil {
		return p, err
	}
	if k.answerFormat == AnswerGSM8K && p.Answer != "" {
		if p.Answer, err = gsm8kAnswer(p.Answer); err != nil {
			return p, fmt.Errorf("%q (data.answer_format gsm8k): %w", k.answer, err)
		}
	}
	p.ID, err = k.text(rec, k.id, "data.id_key", false)
	return p, err
}

// text is the string (or number, as written) at a dotted path; a missing
// required one names the keys the record has and the config key that maps
// them.
func (k recordKeys) text(rec map[string]any, path, configKey string, required bool) (string, error) {
	v := at(rec, path)
	switch x := v.(type) {
	case string:
		if x == "" && required {
			return "", fmt.Errorf("%q is empty", path)
		}
		return x, nil
	case json.Number: // every number: records are decoded with UseNumber (Parquet rows too, as JSON)
		return x.String(), nil
	case nil:
		if !required {
			return "", nil
		}
		return "", fmt.Errorf("no %q in the record (keys: %s); set %s to the key that holds it (dotted for nested records)", path, strings.Join(slices.Sorted(maps.Keys(rec)), ", "), configKey)
	default:
		return "", fmt.Errorf("%q is a %T, want a string or a number (%s)", path, v, configKey)
	}
}

// at is the value at a dotted path (nil when missing).
func at(rec map[string]any, path string) any {
	var v any = rec
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

// chatProblem reads a chat-shaped problem, [{role, content}, ...]: an
// optional system message, then one user message (the problem with its
// instruction) — what verl's data preprocessing writes.
func chatProblem(msgs []any) (problem, system string, err error) {
	for i, m := range msgs {
		mm, ok := m.(map[string]any)
		role, _ := mm["role"].(string)
		content, ok2 := mm["content"].(string)
		if !ok || !ok2 {
			return "", "", fmt.Errorf("message %d: want {\"role\": string, \"content\": string}", i)
		}
		switch {
		case role == "system" && i == 0 && len(msgs) > 1:
			system = content
		case role == "user" && i == len(msgs)-1:
			problem = content
		default:
			return "", "", fmt.Errorf("message %d has role %q: lanpo takes a chat of an optional system message and one user message (the problem)", i, role)
		}
	}
	if problem == "" {
		return "", "", fmt.Errorf("no user message")
	}
	return problem, system, nil
}

// chatData adapts the data settings to chat-shaped records: their messages
// are the chat, so data.prompt_template is not applied and the records'
// system message (the same in every record) is the system prompt. Plain
// records leave d as it is; a mix, or differing system messages, is an
// error naming the first record that differs.
func chatData(d *DataConfig, ps []Problem) error {
	if len(ps) == 0 || !ps[0].Chat {
		for _, p := range ps {
			if p.Chat {
				return fmt.Errorf("%s: a chat record among plain ones (data.problem_key %s)", p.Where, d.keys().problem)
			}
		}
		return nil
	}
	for _, p := range ps {
		if !p.Chat || p.System != ps[0].System {
			return fmt.Errorf("%s: every record must be a chat with the same system message as %s (lanpo takes one system prompt per dataset)", p.Where, ps[0].Where)
		}
	}
	if d.PromptTemplate != DefaultConfig().Data.PromptTemplate || d.SystemPrompt != "" {
		log.Warn().Msg("data.train holds chats: their messages are the prompt, data.prompt_template and data.system_prompt are not applied")
	}
	d.PromptTemplate, d.SystemPrompt = "{problem}", ps[0].System
	return nil
}

// gsm8kAnswer is the final answer of a GSM8K worked solution: what
// follows its last "####", thousands separators removed.
func gsm8kAnswer(s string) (string, error) {
	i := strings.LastIndex(s, "####")
	if i < 0 {
		return "", fmt.Errorf("no \"####\" before the final answer")
	}
	a := strings.TrimSpace(s[i+4:])
	if plain := strings.ReplaceAll(a, ",", ""); plain != a {
		if _, err := strconv.ParseFloat(plain, 64); err == nil {
			a = plain
		}
	}
	if a == "" {
		return "", fmt.Errorf("nothing after \"####\"")
	}
	return a, nil
}

// Cursor walks a dataset in epochs, each a permutation drawn from (seed,
// epoch): its whole state is two integers, saved in checkpoints.
type Cursor struct {
	Seed  uint64 `json:"seed"`
	Epoch int    `json:"epoch"`
	Pos   int    `json:"pos"` // next index into the epoch's permutation
	n     int
	perm  []int
}

// Next returns the indices of the next k items.
func (c *Cursor) Next(n, k int) []int {
	c.n = n
	out := make([]int, 0, k)
	for len(out) < k {
		if c.perm == nil {
			c.perm = rand.New(rand.NewSource(int64(c.Seed) + int64(c.Epoch)*1_000_003)).Perm(n)
		}
		if c.Pos >= n {
			c.Epoch++
			c.Pos = 0
			c.perm = nil
			continue
		}
		out = append(out, c.perm[c.Pos])
		c.Pos++
	}
	return out
}
