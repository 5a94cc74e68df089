package dcp

import (
	"weak"

	"github.com/ckpt-dev/ckpt/formats/pickle"
)

// A claim collects the items of one decoded dict as the unpickler puts them
// (pickle.Options.SetItem), in the typed form the parser wants, when they are what one of
// the Metadata's three large dicts holds: state_dict_metadata (str → tensor or bytes
// record), storage_data (MetadataIndex → _StorageInfo) or planner_data (str → tuple of str
// and int). The dict itself stays empty, so a `.metadata` of hundreds of thousands of
// items never holds their dict slots and key index beside the parser's slices. The first
// item of another shape — or the parser meeting the dict anywhere but in the role its
// items fit — gives the items back to the dict (release), and the general path reads it.
// The claim hangs off its dict (pickle.Dict.Claim): a dict the pickle discards, which the
// parser never visits, is collected with the items it holds.
type claim struct {
	kind claimKind
	// state_dict_metadata: the items and their index by name.
	items []Item
	index map[string]int32
	// storage_data: the entries.
	storage []StorageEntry
	// planner_data: the keys in order, and the paths of those whose path is not their own
	// (fqn,), by position.
	planner []string
	paths   map[int]Path
}

type claimKind uint8

const (
	claimItems claimKind = 1 + iota
	claimStorage
	claimPlanner
)

// setItem is the unpickler's SetItem hook.
func (p *parser) setItem(d *pickle.Dict, k, v pickle.Value) (bool, error) {
	c := claimOf(d)
	if c == nil {
		kind := claimKindOf(k, v)
		if kind == 0 || d.Len() != 0 || d.Class != nil {
			return false, nil
		}
		c = &claim{kind: kind}
		switch kind {
		case claimItems:
			c.index = map[string]int32{}
			if p.itemsClaim() == nil {
				p.items = weak.Make(c) // the first alive: what names are interned against
			}
		case claimStorage:
			// One entry per chunk and bytes item of the items claimed before, usually.
			if items := p.itemsClaim(); items != nil {
				n := 0
				for _, it := range items.items {
					n++
					if it.Tensor != nil {
						n += len(it.Tensor.Chunks) - 1
					}
				}
				c.storage = make([]StorageEntry, 0, n)
			}
		}
		d.Claim = c
	}
	if claimKindOf(k, v) != c.kind || c.kind == claimItems && len(c.items) >= 1<<31-1 {
		return false, p.release(d)
	}
	switch c.kind {
	case claimItems:
		fqn := k.(string)
		var t *TensorMeta
		if x, ok := v.(*TensorMeta); ok {
			t = x
		}
		if i, ok := c.index[fqn]; ok {
			c.items[i].Tensor = t // a key put again keeps its place
			return true, nil
		}
		c.index[fqn] = int32(len(c.items))
		c.items = append(c.items, Item{FQN: fqn, Tensor: t})
	case claimStorage:
		ix, si := k.(*index), v.(*storageInfo)
		c.storage = append(c.storage, StorageEntry{FQN: p.intern(ix.fqn), Offsets: ix.offsets, RelativePath: si.rel,
			Offset: si.offset, Length: si.length, TransformDescriptors: si.transforms})
	case claimPlanner:
		fqn, t := k.(string), v.(pickle.Tuple)
		if s, ok := t[0].(string); !ok || len(t) != 1 || s != fqn {
			path := make(Path, len(t))
			for i, x := range t {
				path[i] = x
			}
			if c.paths == nil {
				c.paths = map[int]Path{}
			}
			c.paths[len(c.planner)] = path
		}
		c.planner = append(c.planner, p.intern(fqn))
	}
	return true, nil
}

// itemsClaim returns the claim collecting state_dict_metadata, when there is one: the
// first items claim still held (set when it is made, cleared when it is released or its
// dict is collected — never found by searching the claims, which a file of many small
// dicts made quadratic).
func (p *parser) itemsClaim() *claim { return p.items.Value() }

// claimOf returns the claim on d, nil if none.
func claimOf(d *pickle.Dict) *claim {
	c, _ := d.Claim.(*claim)
	return c
}

// intern returns the item name equal to fqn held already, so that each name is held once.
func (p *parser) intern(fqn string) string {
	if c := p.itemsClaim(); c != nil {
		if i, ok := c.index[fqn]; ok {
			return c.items[i].FQN
		}
	}
	return fqn
}

// claimKindOf says which dict an item fits, 0 for none.
func claimKindOf(k, v pickle.Value) claimKind {
	switch k.(type) {
	case string:
		switch v := v.(type) {
		case *TensorMeta, *bytesMeta:
			return claimItems
		case pickle.Tuple:
			if len(v) == 0 {
				return 0
			}
			for _, x := range v {
				switch x := x.(type) {
				case string:
				case int64:
					if x < 0 {
						return 0
					}
				default:
					return 0
				}
			}
			return claimPlanner
		}
	case *index:
		if _, ok := v.(*storageInfo); ok {
			return claimStorage
		}
	}
	return 0
}

// claimed returns the claim on v when v is a dict claimed as kind; a dict claimed as
// another kind is released.
func (p *parser) claimed(v pickle.Value, kind claimKind) (*claim, error) {
	d, ok := v.(*pickle.Dict)
	if !ok {
		return nil, nil
	}
	c := claimOf(d)
	if c == nil {
		return nil, nil
	}
	if c.kind != kind {
		return nil, p.release(d)
	}
	return c, nil
}

// release gives a claimed dict its items back, in the order they were put.
func (p *parser) release(d *pickle.Dict) error {
	c := claimOf(d)
	if c == nil {
		return nil
	}
	d.Claim = nil
	if p.itemsClaim() == c {
		p.items = weak.Pointer[claim]{}
	}
	var err error
	put := func(k, v pickle.Value) {
		if err == nil {
			err = d.TrySet(k, v)
		}
	}
	switch c.kind {
	case claimItems:
		for _, it := range c.items {
			if it.Tensor != nil {
				put(it.FQN, it.Tensor)
			} else {
				put(it.FQN, theBytesMeta)
			}
		}
	case claimStorage:
		for _, e := range c.storage {
			put(&index{fqn: e.FQN, offsets: e.Offsets}, &storageInfo{rel: e.RelativePath, offset: e.Offset, length: e.Length, transforms: e.TransformDescriptors})
		}
	case claimPlanner:
		for i, fqn := range c.planner {
			t := pickle.Tuple{fqn}
			if path, ok := c.paths[i]; ok {
				t = pickle.Tuple(path)
			}
			put(fqn, t)
		}
	}
	return err
}

// releaseAny releases v if it is a claimed dict: the parser reads it in the general way.
func (p *parser) releaseAny(v pickle.Value) error {
	if d, ok := v.(*pickle.Dict); ok {
		return p.release(d)
	}
	return nil
}
