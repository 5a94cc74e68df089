package pickle

import (
	"fmt"
	"testing"
)

// stateDictPickle assembles a protocol-2 pickle laid out exactly like
// torch.save(model.state_dict()) output: an OrderedDict of n tensors, each
// _rebuild_tensor_v2(persistent storage id, offset, size, stride,
// requires_grad, OrderedDict()), items in SETITEMS batches of 1000, then
// the _metadata BUILD.
func stateDictPickle(n int) []byte {
	p := new(pb)
	p.proto(2)
	p.global("collections", "OrderedDict")
	odIdx := p.put()
	p.op(opEmptyTuple, opReduce)
	p.put()
	memo := map[string]int{}
	global := func(m, name string) {
		if i, ok := memo[m+"."+name]; ok {
			p.get(i)
			return
		}
		p.global(m, name)
		memo[m+"."+name] = p.put()
	}
	str := func(s string) {
		if i, ok := memo[s]; ok {
			p.get(i)
			return
		}
		p.str(s)
		memo[s] = p.put()
	}
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			if i > 0 {
				p.op(opSetItems)
			}
			p.op(opMark)
		}
		p.str(fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", i))
		p.put()
		global("torch._utils", "_rebuild_tensor_v2")
		p.op(opMark, opMark)
		str("storage")
		global("torch", "FloatStorage")
		p.str(fmt.Sprint(i))
		p.put()
		str("cpu")
		p.int(4096)
		p.op(opTuple)
		p.put()
		p.op(opBinPersID)
		p.int(0)
		p.int(64).int(64).op(opTuple2)
		p.put()
		p.int(64).int(1).op(opTuple2)
		p.put()
		p.op(opNewFalse)
		p.get(odIdx).op(opEmptyTuple, opReduce)
		p.put()
		p.op(opTuple)
		p.put()
		p.op(opReduce)
		p.put()
	}
	if n > 0 {
		p.op(opSetItems)
	}
	p.op(opEmptyDict)
	p.put()
	p.str("_metadata")
	p.put()
	p.get(odIdx).op(opEmptyTuple, opReduce)
	p.put()
	p.op(opMark).str("").put()
	p.op(opEmptyDict).str("version").int(1).op(opSetItem)
	p.op(opSetItems, opSetItem, opBuild)
	return p.stop()
}

func TestStateDictShape(t *testing.T) {
	data := stateDictPickle(2500)
	v := decodeOne(t, data, Options{PersistentLoad: func(pid Value) (Value, error) { return pid, nil }})
	sd := v.(*Dict)
	if sd.Class == nil || sd.Class.Name != "OrderedDict" || sd.Len() != 2500 {
		t.Fatalf("state_dict %v with %d entries", sd.Class, sd.Len())
	}
	w, _ := sd.Get("model.layers.2499.self_attn.q_proj.weight")
	o := w.(*Object)
	if o.Class != (Global{"torch._utils", "_rebuild_tensor_v2"}) || len(o.Args) != 6 {
		t.Fatalf("tensor %+v", o)
	}
	pid := o.Args[0].(Tuple)
	if pid[0] != "storage" || pid[1] != (Global{"torch", "FloatStorage"}) || pid[2] != "2499" || pid[3] != "cpu" || pid[4] != int64(4096) {
		t.Errorf("pid %v", pid)
	}
	if hooks := o.Args[5].(*Dict); hooks.Class.Name != "OrderedDict" || hooks.Len() != 0 {
		t.Errorf("backward hooks %v", hooks)
	}
	md, _ := sd.State.(*Dict).Get("_metadata")
	if ver, _ := md.(*Dict).Keys()[0], 0; ver != "" {
		t.Errorf("_metadata keys %v", md.(*Dict).Keys())
	}
	rep, err := Scan(data)
	if err != nil || rep.Worst() != SafeAllowed || len(rep.Globals) != 3 {
		t.Errorf("Scan: %+v, %v", rep.Globals, err)
	}
}

func BenchmarkDecodeStateDict(b *testing.B) {
	data := stateDictPickle(10000)
	opts := Options{PersistentLoad: func(pid Value) (Value, error) { return pid, nil }}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewDecoder(data, opts).Decode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanStateDict(b *testing.B) {
	data := stateDictPickle(10000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Scan(data); err != nil {
			b.Fatal(err)
		}
	}
}
