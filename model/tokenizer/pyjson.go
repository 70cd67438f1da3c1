package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// pyToJSON re-writes JSON text as transformers' chat-template filter tojson
// writes the value that Python's json.loads makes of it: json.dumps(x,
// ensure_ascii=False) with the default separators ", " and ": ", no indent
// and no key sorting. So keys keep their order (a repeated key keeps its
// first place and takes its last value, as in a Python dict), integers are
// written as given ("-0" becomes "0"), every number with a fraction or an
// exponent is a float written as Python's repr writes it, and only '"', '\'
// and control characters are escaped.
func pyToJSON(raw []byte) (string, error) {
	if !json.Valid(raw) {
		return "", errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var sb strings.Builder
	if err := pyEncode(&sb, dec); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("data after the JSON value")
	}
	return sb.String(), nil
}

// pyEncode writes the next JSON value of dec.
func pyEncode(sb *strings.Builder, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			sb.WriteByte('[')
			for n := 0; dec.More(); n++ {
				if n > 0 {
					sb.WriteString(", ")
				}
				if err := pyEncode(sb, dec); err != nil {
					return err
				}
			}
			sb.WriteByte(']')
			_, err := dec.Token()
			return err
		}
		// An object's members are written into their own builders first, so
		// that a repeated key can replace the value at its first place.
		var keys, vals []string
		at := map[string]int{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key := tok.(string)
			var val strings.Builder
			if err := pyEncode(&val, dec); err != nil {
				return err
			}
			if i, ok := at[key]; ok {
				vals[i] = val.String()
				continue
			}
			at[key] = len(keys)
			keys = append(keys, key)
			vals = append(vals, val.String())
		}
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			pyQuote(sb, k)
			sb.WriteString(": " + vals[i])
		}
		sb.WriteByte('}')
		_, err := dec.Token()
		return err
	case string:
		pyQuote(sb, v)
	case json.Number:
		sb.WriteString(pyNumber(string(v)))
	case bool:
		sb.WriteString(strconv.FormatBool(v))
	case nil:
		sb.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON token %v", tok)
	}
	return nil
}

// pyQuote writes s as json.dumps(s, ensure_ascii=False) does.
func pyQuote(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}

// pyNumber writes a JSON number literal as json.dumps writes json.loads's
// value of it: an int verbatim, a float in repr form.
func pyNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if lit == "-0" {
			return "0"
		}
		return lit
	}
	// A literal beyond float64's range is ±Inf with an error, as float()
	// gives inf; json.dumps then writes Infinity.
	f, _ := strconv.ParseFloat(lit, 64)
	return pyFloatRepr(f)
}

// pyFloatRepr is Python's float.__repr__ (and json's float.__repr__ with
// its names for the non-finite values): the shortest round-trip digits,
// positional when the decimal point falls within 16 digits of them,
// otherwise d.ddde±XX.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, expText, _ := strings.Cut(s, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expText)
	point := exp + 1 // digits[:point] is the integer part
	switch {
	case point <= -4 || point > 16:
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		esign := "+"
		if exp < 0 {
			esign, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, esign, exp)
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits)) + ".0"
	default:
		return sign + digits[:point] + "." + digits[point:]
	}
}
