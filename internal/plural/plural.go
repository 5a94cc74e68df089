// Package plural words counts in messages: "1 tensor", "2 tensors", "3 entries" — never
// "1 tensors" or "tensor(s)".
package plural

import (
	"strconv"
	"strings"
)

// Of is n followed by noun, in the plural unless n is 1: "1 problem", "0 problems",
// "2 entries", "3 matches". noun is an English count noun in the singular.
func Of(n int, noun string) string {
	return strconv.Itoa(n) + " " + Noun(n, noun)
}

// Noun is noun in the plural unless n is 1, by the regular English rules: -y after a
// consonant becomes -ies; -s, -x, -z, -ch and -sh take -es; others take -s.
func Noun(n int, noun string) string {
	if n == 1 || noun == "" {
		return noun
	}
	last := noun[len(noun)-1]
	switch {
	case last == 'y' && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "z"),
		strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return noun + "es"
	}
	return noun + "s"
}
