package dcp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// With SerializationFormat.SAFETENSORS, each data file holds its bytes items as usual and
// then one safetensors blob with all the file's tensor chunks, keyed by FQN, running to the
// end of the file. Every chunk's _StorageInfo.offset is the blob's start and its length the
// chunk's byte size, so chunks are found through the blob's header, whose __metadata__
// records each chunk's offsets under DCP_SHARDING_INFO.

// blobKey identifies a safetensors blob: its data file and start offset.
type blobKey struct {
	rel string
	off int64
}

// blob is a parsed safetensors blob.
type blob struct {
	hdr      *safetensors.Header
	byName   map[string]*safetensors.TensorInfo
	sharding map[string]shardingInfo
}

// shardingInfo is one entry of the DCP_SHARDING_INFO JSON.
type shardingInfo struct {
	SavedOffsets []int64 `json:"saved_offsets"`
}

// looksLikeSafetensors checks for an 8-byte little-endian header length followed by a JSON
// object, as a safetensors blob starts.
func looksLikeSafetensors(b []byte) bool {
	if len(b) < 9 {
		return false
	}
	if n := binary.LittleEndian.Uint64(b); n < 2 || n > uint64(len(b)-8) {
		return false
	}
	for _, c := range b[8:] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// looksLikeSafetensorsAt applies looksLikeSafetensors to the blob at off in f, whose first
// bytes are head: the header length it starts with is checked against the file's size.
func looksLikeSafetensorsAt(f storage.File, off int64, head []byte) bool {
	if len(head) < 9 {
		return false
	}
	if d, ok := storage.Bytes(f); ok {
		return looksLikeSafetensors(d[off:])
	}
	n := binary.LittleEndian.Uint64(head)
	if n < 2 || n > uint64(f.Size()-off-8) {
		return false
	}
	return looksLikeSafetensors(head[:min(uint64(len(head)), 8+n)])
}

// safetensorsChunk returns the chunk e names from the safetensors blob starting at e.Offset.
func (r *reader) safetensorsChunk(e *StorageEntry, path string) (*statedict.Tensor, error) {
	f := r.files[e.RelativePath]
	key := blobKey{e.RelativePath, e.Offset}
	bl, ok := r.blobs[key]
	if !ok {
		size := f.Size() - e.Offset
		hdr, err := safetensors.ReadHeader(io.NewSectionReader(f, e.Offset, size), size)
		if err != nil {
			return nil, fmt.Errorf("safetensors blob (offsets relative to it): %w", err)
		}
		bl = &blob{hdr: hdr, byName: map[string]*safetensors.TensorInfo{}}
		for i := range hdr.Tensors {
			bl.byName[hdr.Tensors[i].Name] = &hdr.Tensors[i]
		}
		if s, ok := hdr.Metadata["DCP_SHARDING_INFO"]; ok {
			if err := json.Unmarshal([]byte(s), &bl.sharding); err != nil {
				return nil, fmt.Errorf("safetensors blob: DCP_SHARDING_INFO: %w", err)
			}
		}
		r.blobs[key] = bl
	}
	ti, ok := bl.byName[e.FQN]
	if !ok {
		return nil, fmt.Errorf("the safetensors blob has no tensor %q", e.FQN)
	}
	if si, ok := bl.sharding[e.FQN]; ok && !slices.Equal(si.SavedOffsets, e.Offsets) {
		return nil, fmt.Errorf("the safetensors blob holds the chunk at %v, not this one", si.SavedOffsets)
	}
	d, ok := statedict.DTypeForSafetensors(ti.DType)
	if !ok {
		return nil, fmt.Errorf("%w: safetensors dtype %s has no torch dtype", ckpterr.ErrUnsupported, ti.DType)
	}
	shape := slices.Clone(ti.Shape)
	if d == statedict.Float4E2M1FNx2 {
		// safetensors counts fp4 values; torch's float4_e2m1fn_x2 elements hold two.
		if len(shape) == 0 || shape[len(shape)-1]%2 != 0 {
			return nil, fmt.Errorf("F4 shape %v has no even last dimension", ti.Shape)
		}
		shape[len(shape)-1] /= 2
	}
	if ti.Size() != e.Length {
		return nil, fmt.Errorf("the safetensors blob holds %d bytes for the chunk, the metadata says %d", ti.Size(), e.Length)
	}
	start := e.Offset + bl.hdr.DataStart + ti.Begin
	var st *statedict.Storage
	if b, ok := storage.Bytes(f); ok {
		st = statedict.NewMappedStorage(e.FQN, "cpu", d, b[start:start+ti.Size()])
		st.Offset = start
	} else {
		st = statedict.NewReaderStorage(e.FQN, "cpu", d, f, start, ti.Size())
	}
	st.File = path
	t := &statedict.Tensor{DType: d, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}
