package pickle

import (
	"flag"
	"os"
	"testing"
)

// TestMain turns off the minimizing of new interesting inputs when fuzzing, unless
// -fuzzminimizetime is given, for the reason formats/dcp's TestMain gives: Go's fuzzer
// minimizes every input that widens coverage, trying candidates quadratic in its length
// until -fuzzminimizetime (60 s) runs out, and FuzzForgetUnfetched reported some 5000 execs
// a minute, most of its time spent minimizing. A crasher is then written as found; rerun
// it with -fuzzminimizetime=60s to shrink it.
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
