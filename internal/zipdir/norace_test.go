//go:build !race

package zipdir

const raceEnabled = false
