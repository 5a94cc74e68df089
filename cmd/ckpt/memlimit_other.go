//go:build !linux

package main

// fitAddressSpace leaves the garbage collector's defaults: address-space limits are
// read on Linux only.
func fitAddressSpace() {}
