package main

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// newTable is the tabwriter every human table goes through: columns two spaces apart,
// and no line ends in spaces (tabwriter pads a cell before an empty last one).
func newTable(w io.Writer, flags uint) *tabwriter.Writer {
	return tabwriter.NewWriter(&trimLines{w: w}, 0, 0, 2, ' ', flags)
}

// trimLines writes lines without their trailing spaces; a line is held until its newline.
type trimLines struct {
	w    io.Writer
	line []byte
}

func (t *trimLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.line = append(t.line, p...)
			break
		}
		t.line = append(bytes.TrimRight(append(t.line, p[:i]...), " "), '\n')
		if _, err := t.w.Write(t.line); err != nil {
			return 0, err
		}
		t.line, p = t.line[:0], p[i+1:]
	}
	return n, nil
}

// writeColumns writes the lines row(0), …, row(n-1) exactly as newTable would — every
// cell but a line's last padded to its column's widest (in runes) plus two spaces, no
// trailing spaces — without holding the table: row is called twice for each line, once
// to measure and once to write (tabwriter keeps every cell of every line until Flush,
// ~250 bytes a row: 75 MB for the 300 000 rows of a large checkpoint's listing). Every
// line must have the same number of cells; a cell holding a tab, newline or other
// character tabwriter treats specially sends the whole table through tabwriter.
func writeColumns(w io.Writer, n int, row func(i int) []string) error {
	var widths []int
	special := false
	for i := 0; i < n && !special; i++ {
		cells := row(i)
		if widths == nil {
			widths = make([]int, len(cells)-1)
		}
		for j, c := range cells {
			if strings.ContainsAny(c, "\t\n\v\f\r\xff") {
				special = true
			}
			if j < len(widths) {
				widths[j] = max(widths[j], utf8.RuneCountInString(c))
			}
		}
	}
	if special {
		tw := newTable(w, 0)
		for i := range n {
			if _, err := io.WriteString(tw, strings.Join(row(i), "\t")+"\n"); err != nil {
				return err
			}
		}
		return tw.Flush()
	}
	bw := bufio.NewWriter(w)
	var line []byte
	for i := range n {
		line = line[:0]
		cells := row(i)
		for j, c := range cells {
			line = append(line, c...)
			if j < len(widths) {
				for k := utf8.RuneCountInString(c); k < widths[j]+2; k++ {
					line = append(line, ' ')
				}
			}
		}
		line = append(bytes.TrimRight(line, " "), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}
