//go:build !amd64

package kernel

// archImpls: no assembly kernels on this architecture.
func archImpls() []*Impl { return nil }
