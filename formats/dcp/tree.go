package dcp

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Nest rebuilds the nested state dict from the items' values (values[i] belongs to
// md.Items[i]) the way torch's dcp_to_torch_save does: items in file order, each placed
// along its planner_data path (string elements are dict keys, int elements list
// positions, missing list slots become None), or under its flattened key at the top level
// when it has no path. A path that runs into a value of the wrong kind is an error naming
// the item.
func Nest(md *Metadata, values []statedict.Value, file string) (*statedict.Dict, error) {
	if len(values) != len(md.Items) {
		return nil, fmt.Errorf("dcp: %d values for %d items", len(values), len(md.Items))
	}
	root := statedict.NewDictSize("", len(md.Items))
	budget := int64(len(md.Items)) + padBudget
	for i, it := range md.Items {
		path, ok := md.PlannerData[it.FQN]
		if !ok {
			if len(md.PlannerData) == 0 {
				// Every item is a top-level key, and the names are unique: no index is
				// built until a lookup needs one.
				root.Append(it.FQN, values[i])
			} else {
				root.Set(it.FQN, values[i])
			}
			continue
		}
		if err := setElement(root, path, values[i], &budget); err != nil {
			return nil, errorAt(file, it.FQN, nil, -1, fmt.Errorf("planner_data path %s: %w", path, err))
		}
	}
	return root, nil
}

// padBudget bounds the None slots Nest may add to lists, beyond one per item: a list
// position past the saved entries is legal (entries that were empty dicts are not saved),
// but a hostile file must not make Nest allocate without bound.
const padBudget = 1 << 20

// setElement is torch.distributed.checkpoint._traverse.set_element: it walks path from
// root, creating a dict (next element a string) or a list (next element an int) where
// nothing is yet, and stores v at the end. Growing lists spends *budget slots; running out
// is an error.
func setElement(root *statedict.Dict, path Path, v statedict.Value, budget *int64) error {
	var cur statedict.Value = root
	for i := range path {
		key := path[i]
		var next statedict.Value // what to store if the slot is empty: the child container or v
		last := i == len(path)-1
		if last {
			next = v
		} else if _, isStr := path[i+1].(string); isStr {
			next = statedict.NewDict("")
		} else {
			next = &statedict.List{}
		}
		switch c := cur.(type) {
		case *statedict.Dict:
			if _, isInt := key.(int64); isInt && last {
				return fmt.Errorf("list index %d into a dict", key)
			}
			if last {
				c.Set(key, v)
				return nil
			}
			got, ok := c.Get(key)
			if !ok {
				c.Set(key, next)
				got = next
			}
			cur = got
		case *statedict.List:
			n, isInt := key.(int64)
			if !isInt {
				return fmt.Errorf("key %q into a list", key)
			}
			if grow := n + 1 - int64(len(c.Items)); grow > *budget {
				return fmt.Errorf("list index %d: lists would hold more empty slots than the checkpoint can explain", n)
			} else if grow > 0 {
				*budget -= grow
			}
			for int64(len(c.Items)) <= n {
				c.Items = append(c.Items, nil)
			}
			if last {
				c.Items[n] = v
				return nil
			}
			if c.Items[n] == nil {
				c.Items[n] = next
			}
			cur = c.Items[n]
		default:
			return fmt.Errorf("element %d (%v) goes into a %T, not a dict or list", i, key, cur)
		}
	}
	return nil
}
