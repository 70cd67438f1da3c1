package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// GPT-2's byte-level alphabet: every byte maps to a printable rune, so BPE
// vocabularies can be stored as text. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map to U+0100 onwards, in byte order.
var (
	byteRune [256]rune
	runeByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = 0x100 + n
			n++
		}
		runeByte[byteRune[b]] = byte(b)
	}
}

// byteLevel appends the byte-level form of piece to sb.
func byteLevel(sb *strings.Builder, piece string) {
	for i := 0; i < len(piece); i++ {
		sb.WriteRune(byteRune[piece[i]])
	}
}

// tokenBytes appends the bytes a vocabulary token stands for: its runes mapped
// back through the byte-level alphabet, or, when one of them is outside it
// (added tokens such as "<|im_end|>" are plain text), the token's own UTF-8.
// This is what Hugging Face's ByteLevel decoder does per token.
func tokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// appendLossy appends b to dst as UTF-8, each maximal invalid subsequence
// replaced by one U+FFFD, as Rust's String::from_utf8_lossy does (Go's
// strings.ToValidUTF8 would merge adjacent invalid runs, and
// utf8.DecodeRune would replace byte by byte).
func appendLossy(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			dst = append(dst, b[i:i+w]...)
			i += w
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += validPrefix(b[i:])
	}
	return dst
}

// validPrefix returns how many leading bytes of b start a well-formed UTF-8
// sequence without completing it (at least 1): the bytes one U+FFFD replaces.
func validPrefix(b []byte) int {
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		c := b[n]
		if n == 1 && (c < lo || c > hi) || n > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
	}
	return n
}

// incompleteTail returns the length of the trailing bytes of b that form a
// well-formed but unfinished UTF-8 sequence (0 if none): what a streaming
// decoder holds back until the next token.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c >= 0x80 && c <= 0xBF {
			continue // continuation byte: look further back for the lead
		}
		if c < 0xC2 || c > 0xF4 {
			return 0
		}
		if validPrefix(b[len(b)-k:]) == k && !utf8.FullRune(b[len(b)-k:]) {
			return k
		}
		return 0
	}
	return 0
}
