package main

import (
	"bytes"
	"io"
	"text/tabwriter"
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
