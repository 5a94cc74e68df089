package mmap

import (
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// mapFile maps the file read-only with a file mapping object and a view of it.
func mapFile(f *os.File, size int) ([]byte, error) {
	h, err := windows.CreateFileMapping(windows.Handle(f.Fd()), nil, windows.PAGE_READONLY, uint32(uint64(size)>>32), uint32(size), nil)
	if err != nil {
		return nil, err
	}
	defer windows.CloseHandle(h)
	addr, err := windows.MapViewOfFile(h, windows.FILE_MAP_READ, 0, 0, uintptr(size))
	if err != nil {
		return nil, err
	}
	// The view lives outside the Go heap until UnmapViewOfFile; its address comes as a
	// uintptr, read here as the pointer it is (not converted by arithmetic, which vet rejects).
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), size), nil
}

func unmap(b []byte) error { return windows.UnmapViewOfFile(uintptr(unsafe.Pointer(&b[0]))) }

func adviseSequential([]byte) {}

// dontNeed: Windows trims a process's working set on its own under memory pressure.
func dontNeed([]byte) {}
