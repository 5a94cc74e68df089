// Package torchlegacy reads checkpoints in torch.save's legacy stream format, the default
// before PyTorch 1.6 and still written with _use_new_zipfile_serialization=False: five
// pickles (magic number, protocol version 1001, system info, the object, the storage keys)
// followed by the raw storages, each an int64 element count and its bytes. Nothing in the
// pickles is executed; storages are views of the mapped file.
package torchlegacy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchpickle"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the name ckpt gives this format.
const Format = "torch-legacy"

// magicNumber is torch.serialization.MAGIC_NUMBER, the first pickled value of the stream.
var magicNumber, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

// Magic is the usual byte prefix of a legacy file: the protocol-2 pickle of the magic
// number. torch reads the magic number with pickle.load, so other protocols (a protocol-4
// FRAME, a protocol-0 text LONG) are legacy files too: IsLegacy recognizes them all.
var Magic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// IsLegacy reports whether head (the first bytes of a file; 512 are plenty) starts with a
// pickle of the magic number, in whatever protocol torch.save wrote it.
func IsLegacy(head []byte) bool {
	if bytes.HasPrefix(head, Magic) {
		return true
	}
	v, err := pickle.NewDecoder(head, pickle.Options{Limits: pickle.Limits{MaxAlloc: 1 << 12}}).Decode()
	m, ok := v.(*big.Int)
	return err == nil && ok && m.Cmp(magicNumber) == 0
}

// maxRemote bounds a legacy stream read from a gs:// or s3:// object: the stream
// interleaves pickles and raw storages, so it is read into memory whole.
const maxRemote = 1 << 30

// Open maps the file at path and reads it as a legacy torch.save stream. A gs:// or s3://
// object (see package storage) is read into memory whole, up to 1 GiB.
func Open(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	data, ok := storage.Bytes(f)
	if !ok {
		if f.Size() > maxRemote {
			f.Close()
			return nil, fmt.Errorf("%s: %w: a legacy (pre-1.6) torch.save stream of %d bytes in object storage; ckpt reads such streams whole and only up to %d bytes remotely: copy it to local disk", path, ckpterr.ErrUnsupported, f.Size(), int64(maxRemote))
		}
		data, err = storage.ReadRange(f, 0, f.Size())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	root, err := decode(data, path, ok)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &statedict.Checkpoint{Format: Format, Path: path, Root: root, Closers: []io.Closer{f}}, nil
}

// Decode reads a legacy stream held in data, the bytes of the local file named file (the
// storages are file-backed: writers and hashing may read them from the file); tensors
// alias data.
func Decode(data []byte, file string) (statedict.Value, error) { return decode(data, file, true) }

// decode is Decode for data that is the file's bytes as stored on disk (fileBacked) or
// that was read into memory from an object in a bucket, which no one can open as a file:
// its storages are memory only, and file names the object in errors.
func decode(data []byte, file string, fileBacked bool) (statedict.Value, error) {
	// fail reports a failure reading what (a part of the stream) at byte off; failStorage
	// one in the record of the storage named key.
	fail := func(what string, off int64, err error) error {
		return &ckpterr.FormatError{Format: Format, File: file, Offset: off, Err: fmt.Errorf("%s: %w", what, err)}
	}
	failStorage := func(key string, off int64, err error) error {
		return &ckpterr.FormatError{Format: Format, File: file, Item: key, Offset: off, Err: fmt.Errorf("storage record: %w", err)}
	}
	if !IsLegacy(data[:min(len(data), 512)]) {
		return nil, fail("magic number", 0, errors.New("not a legacy torch.save stream"))
	}
	var (
		dec  = pickle.NewDecoder(data, pickle.Options{})
		base int64 // offset of dec's input within data
	)
	next := func(what string) (pickle.Value, int64, error) {
		at := base + dec.Offset()
		v, err := dec.Decode()
		if err != nil {
			return nil, at, fail(what, at, err)
		}
		return v, at, nil
	}
	magic, at, err := next("magic number")
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(*big.Int); !ok || m.Cmp(magicNumber) != 0 {
		return nil, fail("magic number", at, errors.New("wrong magic number"))
	}
	proto, at, err := next("protocol version")
	if err != nil {
		return nil, err
	}
	if p, ok := proto.(int64); !ok || p != 1001 {
		return nil, fail("protocol version", at, fmt.Errorf("protocol version %v, want 1001", proto))
	}
	if _, _, err := next("system info"); err != nil {
		return nil, err
	}

	// First pass over the object pickle: learn which storages it references (dtype and
	// element count per key), which the raw records after the key list need.
	objStart := base + dec.Offset()
	refs := map[string]torchpickle.StorageRequest{}
	scan := pickle.NewDecoder(data[objStart:], pickle.Options{PersistentLoad: func(pid pickle.Value) (pickle.Value, error) {
		if cls, ok := torchpickle.ModuleClass(pid); ok {
			return cls, nil // torch.save(model): the module's class
		}
		req, err := torchpickle.ParsePID(pid)
		if err != nil {
			return nil, err
		}
		if prev, ok := refs[req.Key]; ok && prev.DType != req.DType {
			return nil, fmt.Errorf("storage %q referenced as %s and %s", req.Key, prev.DType, req.DType)
		}
		refs[req.Key] = req
		return pickle.None{}, nil
	}})
	if _, err := scan.Decode(); err != nil {
		return nil, fail("object pickle", objStart, err)
	}
	base = objStart + scan.Offset()
	dec = pickle.NewDecoder(data[base:], pickle.Options{})
	keysV, at, err := next("storage keys")
	if err != nil {
		return nil, err
	}
	keyList, ok := keysV.(*pickle.List)
	if !ok {
		return nil, fail("storage keys", at, fmt.Errorf("storage keys are %T, want a list", keysV))
	}

	// The raw records follow back to back in key-list order.
	storages := map[string]*statedict.Storage{}
	off := base + dec.Offset()
	for _, kv := range keyList.Items {
		key, ok := kv.(string)
		if !ok {
			return nil, fail("storage keys", at, fmt.Errorf("storage key is %T, want str", kv))
		}
		req, ok := refs[key]
		if !ok {
			return nil, failStorage(key, off, errors.New("record of a storage the object never references (its element size is unknown)"))
		}
		if int64(len(data))-off < 8 {
			return nil, failStorage(key, off, errors.New("truncated: no element count"))
		}
		n := int64(binary.LittleEndian.Uint64(data[off:]))
		es := int64(req.DType.Size())
		if n < 0 || n > (int64(len(data))-off-8)/es {
			return nil, failStorage(key, off, fmt.Errorf("%d elements of %s run past the end of the file", n, req.DType))
		}
		if n != req.NumEl {
			return nil, failStorage(key, off, fmt.Errorf("record holds %d elements, the pickle says %d", n, req.NumEl))
		}
		st := statedict.NewMappedStorage(key, req.Location, req.DType, data[off+8:off+8+n*es])
		st.File, st.Offset, st.FileBacked = file, off+8, fileBacked
		storages[key] = st
		off += 8 + n*es
	}
	if off != int64(len(data)) {
		return nil, fail("end of stream", off, fmt.Errorf("%d unexpected bytes after the last storage", int64(len(data))-off))
	}
	resolve := func(req torchpickle.StorageRequest) (*statedict.Storage, error) {
		if req.View != nil {
			root, ok := storages[req.View.Key]
			if !ok {
				return nil, fmt.Errorf("view of unknown storage %q", req.View.Key)
			}
			es := int64(req.DType.Size())
			b, _ := root.Mapped()
			if req.View.Offset > int64(len(b))/es || req.View.NumEl > int64(len(b))/es-req.View.Offset {
				return nil, fmt.Errorf("view [%d, +%d) outside storage %q", req.View.Offset, req.View.NumEl, req.View.Key)
			}
			st := statedict.NewMappedStorage(req.Key, req.Location, req.DType, b[req.View.Offset*es:(req.View.Offset+req.View.NumEl)*es])
			st.File, st.Offset = file, root.Offset+req.View.Offset*es
			return st, nil
		}
		st, ok := storages[req.Key]
		if !ok {
			return nil, fmt.Errorf("storage %q is not in the key list", req.Key)
		}
		return st, nil
	}
	root, _, err := torchpickle.Load(data[objStart:], resolve, torchpickle.Options{})
	if err != nil {
		return nil, fail("object pickle", objStart, err)
	}
	return root, nil
}
