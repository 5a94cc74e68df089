package pickle

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodePy2Str turns the bytes of a Python 2 str (STRING, BINSTRING,
// SHORT_BINSTRING) into a Go string: kept as is when they are valid UTF-8,
// else read as latin-1 (each byte one code point), which never fails.
// latin1 reports the fallback.
func decodePy2Str(b []byte) (s string, latin1 bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	var sb strings.Builder
	sb.Grow(len(b) * 2)
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String(), true
}

// latin1Bytes encodes s as latin-1; every rune must be below 256.
func latin1Bytes(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return nil, fmt.Errorf("'latin-1' codec can't encode character %U", r)
		}
		out = append(out, byte(r))
	}
	return out, nil
}

// decodeUTF8 decodes the payload of BINUNICODE and friends like CPython's
// utf-8 codec with the "surrogatepass" error handler: encoded surrogates
// (ED A0 80 ...) are accepted; a high/low pair becomes the character it
// encodes and a lone surrogate becomes U+FFFD, since Go strings cannot hold
// one. Any other invalid byte is an error.
func decodeUTF8(b []byte) (string, error) {
	if utf8.Valid(b) {
		return string(b), nil
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n != 1 {
			sb.WriteRune(r)
			i += n
			continue
		}
		hi, ok := surrogateAt(b, i)
		if !ok {
			return "", fmt.Errorf("invalid UTF-8 byte 0x%02x at position %d", b[i], i)
		}
		i += 3
		if lo, ok := surrogateAt(b, i); ok && utf16.IsSurrogate(hi) && hi < 0xdc00 && lo >= 0xdc00 {
			sb.WriteRune(utf16.DecodeRune(hi, lo))
			i += 3
			continue
		}
		sb.WriteRune(utf8.RuneError)
	}
	return sb.String(), nil
}

// surrogateAt decodes a 3-byte UTF-8 encoded surrogate (U+D800–U+DFFF) at b[i:].
func surrogateAt(b []byte, i int) (rune, bool) {
	if i+3 > len(b) || b[i] != 0xed || b[i+1]&0xe0 != 0xa0 || b[i+2]&0xc0 != 0x80 {
		return 0, false
	}
	return rune(b[i]&0x0f)<<12 | rune(b[i+1]&0x3f)<<6 | rune(b[i+2]&0x3f), true
}

// escapeDecode implements Python's codecs.escape_decode, used for the
// quoted argument of STRING: \\ \' \" \a \b \f \n \r \t \v, \ooo octal,
// \xhh; any other escape keeps the backslash. (Backslash-newline cannot
// occur: the argument ends at the first newline.)
func escapeDecode(s []byte) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return nil, errors.New("trailing \\ in string")
		}
		switch c = s[i]; c {
		case '\\', '\'', '"':
			out = append(out, c)
		case 'a':
			out = append(out, 7)
		case 'b':
			out = append(out, 8)
		case 'f':
			out = append(out, 12)
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, 11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(c - '0')
			for k := 0; k < 2 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; k++ {
				i++
				v = v*8 + int(s[i]-'0')
			}
			out = append(out, byte(v))
		case 'x':
			if i+2 >= len(s) {
				return nil, fmt.Errorf("invalid \\x escape at position %d", i-1)
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("invalid \\x escape at position %d", i-1)
			}
			out = append(out, hi<<4|lo)
			i += 2
		default:
			out = append(out, '\\', c)
		}
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// rawUnicodeEscapeDecode implements Python's raw-unicode-escape codec, used
// by the UNICODE opcode: bytes are latin-1 code points except \uXXXX and
// \UXXXXXXXX escapes. Surrogate pairs are combined; lone surrogates become
// U+FFFD.
func rawUnicodeEscapeDecode(s []byte) (string, error) {
	var sb strings.Builder
	sb.Grow(len(s))
	pendingHi := rune(-1)
	flush := func() {
		if pendingHi >= 0 {
			sb.WriteRune(utf8.RuneError)
			pendingHi = -1
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) || (s[i+1] != 'u' && s[i+1] != 'U') {
			flush()
			sb.WriteRune(rune(c))
			if c == '\\' && i+1 < len(s) {
				// A backslash escapes the next byte from starting an escape.
				i++
				sb.WriteRune(rune(s[i]))
			}
			continue
		}
		n := 4
		if s[i+1] == 'U' {
			n = 8
		}
		if i+2+n > len(s) {
			return "", fmt.Errorf("truncated \\%cXXXX escape at position %d", s[i+1], i)
		}
		var v rune
		for _, h := range s[i+2 : i+2+n] {
			d, ok := unhex(h)
			if !ok {
				return "", fmt.Errorf("truncated \\%cXXXX escape at position %d", s[i+1], i)
			}
			v = v<<4 | rune(d)
		}
		if v > utf8.MaxRune || v < 0 {
			return "", fmt.Errorf("\\Uxxxxxxxx out of range at position %d", i)
		}
		i += 1 + n
		switch {
		case v >= 0xd800 && v < 0xdc00:
			flush()
			pendingHi = v
		case v >= 0xdc00 && v < 0xe000:
			if pendingHi >= 0 {
				sb.WriteRune(utf16.DecodeRune(pendingHi, v))
				pendingHi = -1
			} else {
				sb.WriteRune(utf8.RuneError)
			}
		default:
			flush()
			sb.WriteRune(v)
		}
	}
	flush()
	return sb.String(), nil
}

// parseDecimal parses the text argument of INT, LONG, GET and PUT: an
// optionally signed decimal integer, surrounding ASCII whitespace allowed
// as in Python's int(). The result is int64, or *big.Int outside int64.
func parseDecimal(s string) (Value, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	} else if !errors.Is(err, strconv.ErrRange) {
		return nil, fmt.Errorf("invalid integer literal %q", truncateForError(s))
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, fmt.Errorf("invalid integer literal %q", truncateForError(s))
	}
	return b, nil
}

// truncateForError shortens s for inclusion in an error message.
func truncateForError(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
