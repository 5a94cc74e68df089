// Package fuzzopt holds the fuzzing options the parsers' tests share.
package fuzzopt

import "flag"

// NoMinimize turns off the minimizing of new interesting inputs when the test binary is
// fuzzing, unless -fuzzminimizetime is given; a TestMain calls it before m.Run. Go's fuzzer
// minimizes every input that widens coverage, trying candidates quadratic in its length
// until -fuzzminimizetime (60 s) runs out: with formats/dcp's .metadata seeds (up to 22 KB)
// the worker spent each minute minimizing one input, and FuzzMetadataStreamed reported some
// 25 execs a minute (FuzzForgetUnfetched some 5000); unminimized they run thousands a
// second. A crasher is then written as found; rerun it with -fuzzminimizetime=60s to shrink
// it.
func NoMinimize() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.fuzzminimizetime" })
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" && !given {
		if err := flag.Set("test.fuzzminimizetime", "0"); err != nil {
			panic(err)
		}
	}
}
