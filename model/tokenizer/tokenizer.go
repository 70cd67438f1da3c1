// Package tokenizer encodes and decodes text exactly as Hugging Face's
// tokenizers library does for the byte-level BPE tokenizers of Qwen2, Qwen2.5,
// Qwen3 and Llama-3, and renders their chat templates.
//
// The split pre-tokenizer is lanpo's own (split.go), because Go's regexp
// cannot express the look-ahead in these patterns; SplitPreTokenizer plugs it
// into sugarme/tokenizer's pipeline. Encode runs the same stages without that
// pipeline's per-character offset bookkeeping, which lanpo does not need, and
// with a BPE merge loop of its own (bpe.go says why).
package tokenizer

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a loaded tokenizer.json (+ tokenizer_config.json). It is safe
// for concurrent use.
type Tokenizer struct {
	// Family is the split pattern: "qwen" (Qwen2/2.5/3) or "llama3".
	Family string
	// BOS, EOS and Pad are the token names from tokenizer_config.json, ""
	// where it has none.
	BOS, EOS, Pad string

	split        splitter
	nfc          bool
	vocab        map[string]int // byte-level BPE tokens
	merger       merger
	ignoreMerges bool
	tokens       []string // id → token (model vocabulary and added tokens)

	added              []addedToken // longest first
	firstBytes         [256]bool    // first bytes of added tokens
	hasNormalizedAdded bool
	addedByID          map[int]string
	addedByContent     map[string]int
	special            map[int]bool

	prefix, suffix []int // added by the post-processor

	template       string // chat template text, "" when none
	templateSource string // where it came from, for errors
	chatFormat     string // forced renderer (SetChatFormat), "" to recognise

	cache *wordCache
}

type addedToken struct {
	id                                     int
	content                                string
	singleWord, lstrip, rstrip, normalized bool
}

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a vocabulary or added token.
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.addedByContent[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// Token returns the string of id (byte-level form for vocabulary tokens).
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial reports whether id is an added token marked special (what
// skip-special-tokens decoding drops).
func (t *Tokenizer) IsSpecial(id int) bool { return t.special[id] }

// SpecialIDs lists the special tokens' ids in increasing order.
func (t *Tokenizer) SpecialIDs() []int {
	var ids []int
	for id := range t.special {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Encode returns the token ids of text. addSpecial adds the tokens of the
// post-processor (Llama-3's <|begin_of_text|>; nothing for Qwen), like
// add_special_tokens in Hugging Face. Special tokens written in the text
// (<|im_start|>, <think>, …) are recognised as Hugging Face does. text must
// be valid UTF-8.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		i := firstInvalid(text)
		return nil, fmt.Errorf("text is not valid UTF-8 (byte %d: 0x%02x)", i, text[i])
	}
	ids := make([]int, 0, len(text)/3+len(t.prefix)+len(t.suffix))
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	ids = t.appendText(ids, text)
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, nil
}

func firstInvalid(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, w := utf8.DecodeRuneInString(s[i:]); w == 1 {
				return i
			}
		}
	}
	return 0
}

// EncodeBatch encodes texts on up to workers goroutines (GOMAXPROCS when
// workers < 1). Results are in input order; the error names the first bad
// text by index.
func (t *Tokenizer) EncodeBatch(texts []string, addSpecial bool, workers int) ([][]int, error) {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([][]int, len(texts))
	errs := make([]error, len(texts))
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := 0; w < min(workers, len(texts)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= len(texts) {
					return
				}
				out[k], errs[k] = t.Encode(texts[k], addSpecial)
			}
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("text %d: %w", k, err)
		}
	}
	return out, nil
}

// appendText is Hugging Face's pipeline for one sequence: added tokens that
// match the raw text are cut out first; each remaining gap is normalised,
// searched for normalised added tokens, split by the pre-tokenizer, mapped
// to the byte-level alphabet and merged by BPE.
func (t *Tokenizer) appendText(ids []int, text string) []int {
	return t.eachAdded(text, false, ids, func(ids []int, gap string) []int {
		if t.nfc {
			gap = norm.NFC.String(gap)
		}
		if !t.hasNormalizedAdded {
			return t.appendWords(ids, gap)
		}
		return t.eachAdded(gap, true, ids, t.appendWords)
	})
}

// eachAdded finds the added tokens whose normalized flag equals normalized in
// s, leftmost-longest and non-overlapping, appends their ids, and passes the
// text between them to gap.
func (t *Tokenizer) eachAdded(s string, normalized bool, ids []int, gap func([]int, string) []int) []int {
	start := 0 // start of the pending gap
	for i := 0; i < len(s); {
		if !t.firstBytes[s[i]] {
			i++
			continue
		}
		a := t.addedAt(s, i, normalized)
		if a == nil {
			i++
			continue
		}
		from, to := i, i+len(a.content)
		if a.singleWord && (from > 0 && isWordRune(lastRune(s[:from])) || to < len(s) && isWordRune(firstRune(s[to:]))) {
			i = to
			continue
		}
		if a.lstrip {
			for from > start {
				r, w := utf8.DecodeLastRuneInString(s[start:from])
				if !isWhitespace(r) {
					break
				}
				from -= w
			}
		}
		if a.rstrip {
			for to < len(s) {
				r, w := utf8.DecodeRuneInString(s[to:])
				if !isWhitespace(r) {
					break
				}
				to += w
			}
		}
		if from > start {
			ids = gap(ids, s[start:from])
		}
		ids = append(ids, a.id)
		start, i = to, to
	}
	if start < len(s) {
		ids = gap(ids, s[start:])
	}
	return ids
}

// addedAt returns the longest added token that starts at s[i:].
func (t *Tokenizer) addedAt(s string, i int, normalized bool) *addedToken {
	for k := range t.added {
		a := &t.added[k]
		if a.normalized == normalized && strings.HasPrefix(s[i:], a.content) {
			return a
		}
	}
	return nil
}

// isWordRune is Hugging Face's word character for single_word tokens.
func isWordRune(r rune) bool {
	return r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
		r > utf8.RuneSelf && (isLetterOrDigit(r))
}

func lastRune(s string) rune  { r, _ := utf8.DecodeLastRuneInString(s); return r }
func firstRune(s string) rune { r, _ := utf8.DecodeRuneInString(s); return r }

// appendWords splits s with the pre-tokenizer and appends each piece's BPE ids.
func (t *Tokenizer) appendWords(ids []int, s string) []int {
	var sb strings.Builder
	start := 0
	t.split.split(s, func(end int) {
		ids = t.appendWord(ids, s[start:end], &sb)
		start = end
	})
	return ids
}

// appendWord appends the BPE ids of one pre-tokenized piece.
func (t *Tokenizer) appendWord(ids []int, piece string, sb *strings.Builder) []int {
	if cached, ok := t.cache.get(piece); ok {
		return append(ids, cached...)
	}
	sb.Reset()
	byteLevel(sb, piece)
	word := sb.String()
	var out []int
	if id, ok := t.vocab[word]; ok && t.ignoreMerges {
		out = []int{id}
	} else {
		out = t.merger.merge(word, t.vocab)
	}
	t.cache.put(piece, out)
	return append(ids, out...)
}

// Decode returns the text of ids, as Hugging Face's decode does:
// skipSpecial drops special added tokens; byte sequences that are not valid
// UTF-8 become U+FFFD. Ids outside the vocabulary are skipped, as there.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		b = t.appendTokenBytes(b, id, skipSpecial)
	}
	return string(appendLossy(nil, b))
}

func (t *Tokenizer) appendTokenBytes(b []byte, id int, skipSpecial bool) []byte {
	tok, ok := t.Token(id)
	if !ok || skipSpecial && t.special[id] {
		return b
	}
	return tokenBytes(b, tok)
}

// Stream decodes ids one at a time for streaming output. Each Add returns
// the text that the new token completes; bytes of a character split across
// tokens are held back, so no output ever ends in broken UTF-8. The
// concatenation of all Add results and Flush equals Decode of all the ids.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
}

// NewStream starts a streaming decode.
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skipSpecial: skipSpecial}
}

// Add decodes one more id.
func (s *Stream) Add(id int) string {
	s.pending = s.t.appendTokenBytes(s.pending, id, s.skipSpecial)
	keep := incompleteTail(s.pending)
	out := appendLossy(nil, s.pending[:len(s.pending)-keep])
	s.pending = append(s.pending[:0], s.pending[len(s.pending)-keep:]...)
	return string(out)
}

// Flush returns what is held back (an unfinished character becomes U+FFFD).
func (s *Stream) Flush() string {
	out := appendLossy(nil, s.pending)
	s.pending = s.pending[:0]
	return string(out)
}

// wordCache remembers the ids of pre-tokenized pieces. It is sharded so
// that parallel encoders rarely wait for each other, and stops growing at
// a fixed size, as Hugging Face's BPE cache does.
type wordCache struct {
	seed   maphash.Seed
	shards [64]struct {
		sync.RWMutex
		m map[string][]int
	}
}

const cacheShardCap = 4096 // 64 shards: 262,144 pieces at most

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int)
	}
	return c
}

func (c *wordCache) shard(key string) int { return int(maphash.String(c.seed, key) % 64) }

func (c *wordCache) get(key string) ([]int, bool) {
	s := &c.shards[c.shard(key)]
	s.RLock()
	v, ok := s.m[key]
	s.RUnlock()
	return v, ok
}

func (c *wordCache) put(key string, ids []int) {
	s := &c.shards[c.shard(key)]
	s.Lock()
	if len(s.m) < cacheShardCap {
		s.m[strings.Clone(key)] = ids
	}
	s.Unlock()
}

// isWhitespace is Rust's char::is_whitespace (the White_Space property),
// used by lstrip/rstrip of added tokens.
func isWhitespace(r rune) bool { return unicode.IsSpace(r) }

// isLetterOrDigit approximates Rust's char::is_alphanumeric.
func isLetterOrDigit(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

// Int64s converts token ids to the int64 the model's tensors take.
func Int64s(ids []int) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// Ints converts model token ids (int64) to the ints the tokenizer takes.
func Ints(ids []int64) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// StripAddedTokens removes every occurrence of an added token's text
// (<|im_start|>, <|endoftext|>, <think>, …) from text and says how many it
// removed. Text a model wrote goes into later prompts as text; encoded as
// it is, "<|im_start|>system" inside it would become a real turn boundary
// (encoding recognizes added tokens anywhere, as Hugging Face does).
// Removal repeats until none is left, so pieces around a removed token
// cannot join into a new one.
func (t *Tokenizer) StripAddedTokens(text string) (string, int) {
	removed := 0
	for changed := true; changed; {
		changed = false
		for _, a := range t.added { // longest first
			if n := strings.Count(text, a.content); n > 0 {
				text = strings.ReplaceAll(text, a.content, "")
				removed += n
				changed = true
			}
		}
	}
	return text, removed
}

// Pieces decodes ids one token at a time: piece i is the text token i
// completes (Stream's), the last one with what was held back; their
// concatenation is Decode(ids, skipSpecial). A byte offset in the decoded
// text then names its token.
func (t *Tokenizer) Pieces(ids []int, skipSpecial bool) []string {
	s := t.NewStream(skipSpecial)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.Add(id)
	}
	if n := len(out); n > 0 {
		out[n-1] += s.Flush()
	}
	return out
}
