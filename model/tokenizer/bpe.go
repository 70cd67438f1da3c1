package tokenizer

// merger applies BPE merges to one byte-level word the way Hugging Face's
// BPE model does: repeatedly merge the adjacent pair with the lowest merge
// rank, the leftmost one among equal ranks.
//
// sugarme/tokenizer's Word.MergeAll is not used here: its heap orders equal
// ranks by an unset timestamp, so a word with a repeated pair ("aaaa",
// runs of spaces or newlines) merges in an arbitrary order and gives other
// ids than Hugging Face (TestCorpusMatchesHuggingFace catches it).
type merger struct {
	ranks map[uint64]mergeVal // (left id, right id) → rank and merged id
}

type mergeVal struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type symbol struct {
	id         int32
	prev, next int32 // neighbours, -1 at the ends
	dead       bool
}

type candidate struct {
	rank, pos, id int32
}

func less(a, b candidate) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }

// merge returns the ids of word, whose runes are byte-level characters that
// all exist in vocab.
func (m *merger) merge(word string, vocab map[string]int) []int {
	syms := make([]symbol, 0, len(word))
	for _, r := range word {
		syms = append(syms, symbol{id: int32(vocab[string(r)]), prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	syms[len(syms)-1].next = -1
	var heap []candidate
	push := func(pos int32) {
		s := syms[pos]
		if s.next < 0 {
			return
		}
		if v, ok := m.ranks[pairKey(s.id, syms[s.next].id)]; ok {
			heap = heapPush(heap, candidate{v.rank, pos, v.id})
		}
	}
	for i := range syms {
		push(int32(i))
	}
	for len(heap) > 0 {
		var top candidate
		top, heap = heapPop(heap)
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		if v, ok := m.ranks[pairKey(s.id, right.id)]; !ok || v.id != top.id {
			continue // this pair changed since it was queued
		}
		s.id = top.id
		right.dead = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
		}
		if s.prev >= 0 {
			push(s.prev)
		}
		push(top.pos)
	}
	out := make([]int, 0, len(syms))
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out
}

func heapPush(h []candidate, c candidate) []candidate {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []candidate) (candidate, []candidate) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && less(h[l], h[m]) {
			m = l
		}
		if r < n && less(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}
