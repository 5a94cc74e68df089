package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports a long job's progress on stderr as the --progress flag says: a bar on a
// terminal, plain lines (every 10% and at most every 5 s) where stderr is a file or a pipe
// (CI logs, nohup), nothing with never or --quiet. Sizes are in IEC units, as the summary's.
type progress struct {
	report func(done, total int64)
	finish func()
}

// newProgress makes the reporter for a job described as what ("converting"), writing to w.
func newProgress(w io.Writer, mode string, quiet bool, what string) (*progress, error) {
	mode, err := progressChoice.parse(mode)
	if err != nil {
		return nil, err
	}
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	switch {
	case quiet || mode == "never":
		return &progress{}, nil
	case tty:
		bar := progressbar.NewOptions64(-1, progressbar.OptionSetWriter(w),
			progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true), progressbar.OptionSetDescription(what),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
		return &progress{report: func(done, total int64) {
			if bar.GetMax64() != total {
				bar.ChangeMax64(total)
			}
			bar.Set64(done)
		}, finish: func() { bar.Finish() }}, nil
	case mode == "always" || mode == "auto":
		return plainProgress(w, what, 5*time.Second), nil
	}
	return &progress{}, nil
}

// plainProgress prints a line at every tenth of the total and when every seconds passed
// since the last line, and one at the end.
func plainProgress(w io.Writer, what string, every time.Duration) *progress {
	var mu sync.Mutex
	start := time.Now()
	last := start
	lastTenth := int64(-1)
	var done, total int64
	line := func() {
		pct := 100.0
		if total > 0 {
			pct = 100 * float64(done) / float64(total)
		}
		fmt.Fprintf(w, "%s: %s of %s (%.0f%%) in %.1fs\n", what, humanBytes(done), humanBytes(total), pct, time.Since(start).Seconds())
	}
	return &progress{
		report: func(d, t int64) {
			mu.Lock()
			defer mu.Unlock()
			done, total = d, t
			tenth := int64(0)
			if t > 0 {
				tenth = 10 * d / t
			}
			if now := time.Now(); tenth > lastTenth || now.Sub(last) >= every {
				lastTenth, last = tenth, now
				line()
			}
		},
		finish: func() {
			mu.Lock()
			defer mu.Unlock()
			if lastTenth < 10 && total > 0 {
				line()
			}
		},
	}
}
