package dcp

import (
	"flag"
	"os"
	"testing"
)

// TestMain turns off the minimizing of new interesting inputs when fuzzing, unless
// -fuzzminimizetime is given. Go's fuzzer minimizes every input that widens coverage,
// trying candidates quadratic in its length until -fuzzminimizetime (60 s) runs out: the
// .metadata seeds are up to 22 KB, so the worker spent each minute minimizing one input and
// FuzzMetadataStreamed reported some 25 execs a minute. Unminimized it runs thousands a
// second. A crasher is then written as found; rerun it with -fuzzminimizetime=60s to shrink it.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" && !given {
		if err := flag.Set("test.fuzzminimizetime", "0"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
