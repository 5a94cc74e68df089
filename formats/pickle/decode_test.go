package pickle

import (
	"errors"
	"io"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

func mkDict(kv ...Value) *Dict {
	d := &Dict{}
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

func bigInt(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 0)
	if !ok {
		panic(s)
	}
	return v
}

func sameValue(t *testing.T, got, want Value) {
	t.Helper()
	g, w := normalize(t, canonValue(got)), normalize(t, canonValue(want))
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got %v\nwant %v\n(first difference at %s)", g, w, firstDiff("", g, w))
	}
}

func decodeOne(t *testing.T, in []byte, opts Options) Value {
	t.Helper()
	d := NewDecoder(in, opts)
	v, err := d.Decode()
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if d.Offset() != int64(len(in)) {
		t.Errorf("Offset = %d, want %d", d.Offset(), len(in))
	}
	return v
}

// Opcodes Python 3's pickler never writes (Python 2 text forms, INST, OBJ,
// DUP, the 8-byte forms) and other hand-written sequences.
func TestDecodeOpcodes(t *testing.T) {
	pos := func(in string) []byte { return []byte(in) }
	tests := []struct {
		name string
		in   []byte
		want Value
	}{
		{"INT true", pos("I01\n."), true},
		{"INT false", pos("I00\n."), false},
		{"INT negative", pos("I-42\n."), int64(-42)},
		{"INT spaces", pos("I 7 \n."), int64(7)},
		{"INT big", pos("I99999999999999999999\n."), bigInt("99999999999999999999")},
		{"LONG py2", pos("L123L\n."), int64(123)},
		{"LONG big negative", pos("L-99999999999999999999L\n."), bigInt("-99999999999999999999")},
		{"FLOAT", pos("F1.5\n."), 1.5},
		{"FLOAT inf overflow", pos("F1e999\n."), math.Inf(1)},
		{"FLOAT -inf", pos("F-inf\n."), math.Inf(-1)},
		{"STRING escapes", pos("S'a\\nb\\x41\\101\\''\n."), "a\nbAA'"},
		{"STRING double quoted", pos("S\"it's\"\n."), "it's"},
		{"STRING unknown escape kept", pos("S'\\q'\n."), "\\q"},
		{"SHORT_BINSTRING latin-1 fallback", pos("U\x01\xe9."), "é"},
		{"SHORT_BINSTRING utf-8", pos("U\x02\xc3\xa9."), "é"},
		{"BINSTRING", pos("T\x03\x00\x00\x00abc."), "abc"},
		{"UNICODE escapes", pos("Vcaf\xe9 \\u263a \\U0001F600\n."), "café ☺ 😀"},
		{"UNICODE escaped backslash", pos("V\\\\u0041\n."), "\\\\u0041"},
		{"UNICODE surrogate pair", pos("V\\ud83d\\ude00\n."), "😀"},
		{"UNICODE lone surrogate", pos("V\\ud800x\n."), "\uFFFDx"},
		{"UNICODE trailing backslash", pos("Vx\\\n."), "x\\"},
		{"BINUNICODE surrogatepass pair", pos("X\x06\x00\x00\x00\xed\xa0\xbd\xed\xb8\x80."), "😀"},
		{"BINUNICODE8", new(pb).op(opBinUnicode8).u64(2).op('h', 'i').stop(), "hi"},
		{"BINBYTES8", new(pb).op(opBinBytes8).u64(2).op(1, 2).stop(), []byte{1, 2}},
		{"BYTEARRAY8", new(pb).op(opByteArray8).u64(1).op(9).stop(), []byte{9}},
		{"BINBYTES", pos("B\x01\x00\x00\x00z."), []byte("z")},
		{"LONG1 -1", pos("\x8a\x01\xff."), int64(-1)},
		{"LONG1 0", pos("\x8a\x00."), int64(0)},
		{"LONG1 -32768", pos("\x8a\x02\x00\x80."), int64(-32768)},
		{"LONG1 9 bytes fitting int64", pos("\x8a\x09\x01\x00\x00\x00\x00\x00\x00\x00\x00."), int64(1)},
		{"LONG4 2**64", pos("\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01."), bigInt("18446744073709551616")},
		{"LONG4 -2**64", pos("\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff."), bigInt("-18446744073709551616")},
		{"BININT negative", pos("J\xfe\xff\xff\xff."), int64(-2)},
		{"BININT2", pos("M\x00\x01."), int64(256)},
		{"LIST", pos("(I1\nI2\nl."), &List{Items: []Value{int64(1), int64(2)}}},
		{"DICT", pos("(S'a'\nI1\nd."), mkDict("a", int64(1))},
		{"TUPLE", pos("(I1\nS'x'\nt."), Tuple{int64(1), "x"}},
		{"EMPTY_TUPLE", pos(")."), Tuple{}},
		{"POP", pos("I1\nI2\n0."), int64(1)},
		{"POP removes a MARK on top", pos("(K\x01(0."), int64(1)},
		{"POP_MARK", pos("(I1\nI2\n1I3\n."), int64(3)},
		{"GET/PUT text", pos("I5\np7\n0g7\n."), int64(5)},
		{"MEMOIZE", pos("\x80\x04K\x05\x940h\x00."), int64(5)},
		{"FRAME", new(pb).proto(4).op(opFrame).u64(3).op('K', 1, '.').Bytes(), int64(1)},
		{"EMPTY_SET ADDITEMS dedups", pos("\x8f(K\x01K\x02K\x01\x90."), &Set{Items: []Value{int64(1), int64(2)}}},
		{"FROZENSET", pos("(K\x01\x88\x91."), &Set{Items: []Value{int64(1)}, Frozen: true}},
		{"INST", pos("(S'x'\nimylab.m\nC\n."), &Object{Class: Global{"mylab.m", "C"}, Kind: Inst, Args: Tuple{"x"}}},
		{"INST renamed builtin set", pos("((lI1\naI2\nai__builtin__\nset\n."), &Set{Items: []Value{int64(1), int64(2)}}},
		{"OBJ", pos("(cmylab.m\nC\nI1\no."), &Object{Class: Global{"mylab.m", "C"}, Kind: Inst, Args: Tuple{int64(1)}}},
		{"GLOBAL renamed", pos("c__builtin__\nxrange\n."), Global{"builtins", "range"}},
		{"GLOBAL copy_reg", pos("ccopy_reg\n_reconstructor\n."), Global{"copyreg", "_reconstructor"}},
		{"STACK_GLOBAL renamed below protocol 3", new(pb).proto(2).str("__builtin__").str("set").op(opStackGlobal).stop(), Global{"builtins", "set"}},
		{"STACK_GLOBAL kept at protocol 4", new(pb).proto(4).sstr("__builtin__").sstr("set").op(opStackGlobal).stop(), Global{"__builtin__", "set"}},
		{"BUILD on a global", pos("cmylab\nC\n}b."), &Object{Class: Global{"mylab", "C"}, Kind: Build, State: &Dict{}}},
		{"BUILD on an object", pos("cmylab\nC\n)\x81(S'a'\nK\x01db."), &Object{Class: Global{"mylab", "C"}, Kind: NewObj, Args: Tuple{}, State: mkDict("a", int64(1))}},
		{"APPENDS on an object", pos("cmylab\nL\n)\x81(K\x01K\x02e."), &Object{Class: Global{"mylab", "L"}, Kind: NewObj, Args: Tuple{}, ListItems: []Value{int64(1), int64(2)}}},
		{"SETITEMS on an object", pos("cmylab\nD\n)\x81(K\x01K\x02u."), &Object{Class: Global{"mylab", "D"}, Kind: NewObj, Args: Tuple{}, DictItems: mkDict(int64(1), int64(2))}},
		{"NEWOBJ_EX", new(pb).proto(4).global("mylab", "K").op(opEmptyTuple).op(opEmptyDict).sstr("k").int(1).op(opSetItem).op(opNewObjEx).stop(),
			&Object{Class: Global{"mylab", "K"}, Kind: NewObjEx, Args: Tuple{}, Kwargs: mkDict("k", int64(1))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sameValue(t, decodeOne(t, tc.in, Options{}), tc.want)
			if _, err := Scan(tc.in); err != nil {
				t.Errorf("Scan: %v", err)
			}
		})
	}
}

// The data constructors decoded natively instead of being recorded as calls.
func TestDecodeConstructors(t *testing.T) {
	od := func() *Dict { return &Dict{Class: &Global{"collections", "OrderedDict"}} }
	withItems := func(d *Dict, kv ...Value) *Dict {
		for i := 0; i < len(kv); i += 2 {
			d.Set(kv[i], kv[i+1])
		}
		return d
	}
	counter := withItems(&Dict{Class: &Global{"collections", "Counter"}}, "a", int64(3))
	dd := withItems(&Dict{Class: &Global{"collections", "defaultdict"}, Default: Global{"builtins", "list"}}, "a", &List{Items: []Value{int64(1)}})
	tests := []struct {
		name string
		in   []byte
		want Value
	}{
		{"OrderedDict()", []byte("\x80\x02ccollections\nOrderedDict\n)R."), od()},
		{"OrderedDict(pairs)", new(pb).proto(2).global("collections", "OrderedDict").
			op(opEmptyList, opMark).str("a").int(1).op(opTuple2).str("b").int(2).op(opTuple2).op(opAppends, opTuple1, opReduce).stop(),
			withItems(od(), "a", int64(1), "b", int64(2))},
		{"OrderedDict with _metadata", new(pb).proto(2).global("collections", "OrderedDict").op(opEmptyTuple, opReduce).
			str("w").int(1).op(opSetItem).op(opEmptyDict).str("_metadata").global("collections", "OrderedDict").op(opEmptyTuple, opReduce).
			op(opMark).str("").op(opEmptyDict).str("version").int(1).op(opSetItem).op(opSetItems).op(opSetItem, opBuild).stop(),
			func() *Dict {
				d := withItems(od(), "w", int64(1))
				d.State = mkDict("_metadata", withItems(od(), "", mkDict("version", int64(1))))
				return d
			}()},
		{"Counter", []byte("\x80\x02ccollections\nCounter\n}X\x01\x00\x00\x00aK\x03s\x85R."), counter},
		{"defaultdict", []byte("\x80\x02ccollections\ndefaultdict\nc__builtin__\nlist\n\x85RX\x01\x00\x00\x00a]K\x01as."), dd},
		{"defaultdict()", []byte("\x80\x02ccollections\ndefaultdict\n)R."), &Dict{Class: &Global{"collections", "defaultdict"}, Default: None{}}},
		{"dict(pairs)", []byte("c__builtin__\ndict\n((K\x01K\x02tt\x85R."), mkDict(int64(1), int64(2))},
		{"set(list)", []byte("c__builtin__\nset\n]K\x01aK\x02a\x85R."), &Set{Items: []Value{int64(1), int64(2)}}},
		{"frozenset(list)", []byte("c__builtin__\nfrozenset\n]K\x01a\x85R."), &Set{Items: []Value{int64(1)}, Frozen: true}},
		{"list(tuple)", []byte("c__builtin__\nlist\nK\x01\x85\x85R."), &List{Items: []Value{int64(1)}}},
		{"tuple(list)", []byte("c__builtin__\ntuple\n]K\x01a\x85R."), Tuple{int64(1)}},
		{"_codecs.encode latin1", new(pb).proto(2).global("_codecs", "encode").str(latin1UTF8([]byte{0, 0xff, 'b'})).str("latin1").op(opTuple2, opReduce).stop(), []byte{0, 0xff, 'b'}},
		{"_codecs.encode utf-8", new(pb).proto(2).global("_codecs", "encode").str("é").str("utf-8").op(opTuple2, opReduce).stop(), []byte("é")},
		{"_codecs.encode default", new(pb).proto(2).global("_codecs", "encode").str("é").op(opTuple1, opReduce).stop(), []byte("é")},
		{"_codecs.encode unknown codec stays inert", new(pb).proto(2).global("_codecs", "encode").str("x").str("rot13").op(opTuple2, opReduce).stop(),
			&Object{Class: Global{"_codecs", "encode"}, Args: Tuple{"x", "rot13"}}},
		{"bytes()", []byte("\x80\x02c__builtin__\nbytes\n)R."), []byte{}},
		{"bytearray(str, latin-1)", new(pb).proto(2).global("__builtin__", "bytearray").str(latin1UTF8([]byte{0xfe})).str("latin-1").op(opTuple2, opReduce).stop(), []byte{0xfe}},
		{"bytearray(bytes)", []byte("\x80\x03cbuiltins\nbytearray\nC\x02ab\x85R."), []byte("ab")},
		{"complex", []byte("c__builtin__\ncomplex\n(F1.0\nF2.0\ntR."), complex(1, 2)},
		{"complex NEWOBJ", []byte("\x80\x02cbuiltins\ncomplex\nK\x01K\x02\x86\x81."), complex(1, 2)},
		{"NEWOBJ dict is empty", []byte("\x80\x02cbuiltins\ndict\nK\x01\x85\x81."), &Dict{}},
		{"copyreg._reconstructor object", []byte("ccopy_reg\n_reconstructor\n(cargparse\nNamespace\nc__builtin__\nobject\nNtR(dS'lr'\nF0.5\nsb."),
			&Object{Class: Global{"argparse", "Namespace"}, Kind: NewObj, Args: Tuple{}, State: mkDict("lr", 0.5)}},
		{"copyreg._reconstructor dict base", []byte("ccopy_reg\n_reconstructor\n(cmylab\nMyDict\nc__builtin__\ndict\n(dS'k'\nI1\nstR."),
			&Object{Class: Global{"mylab", "MyDict"}, Kind: NewObj, Args: Tuple{}, DictItems: mkDict("k", int64(1))}},
		{"copyreg._reconstructor list base", []byte("ccopy_reg\n_reconstructor\n(cmylab\nMyList\nc__builtin__\nlist\n(lI1\natR."),
			&Object{Class: Global{"mylab", "MyList"}, Kind: NewObj, Args: Tuple{}, ListItems: []Value{int64(1)}}},
		{"copyreg._reconstructor int base", []byte("ccopy_reg\n_reconstructor\n(cmylab\nMyInt\nc__builtin__\nint\nI5\ntR."),
			&Object{Class: Global{"mylab", "MyInt"}, Kind: NewObj, Args: Tuple{int64(5)}}},
		{"copyreg.__newobj__", []byte("ccopyreg\n__newobj__\n(cmylab\nC\nI1\ntR."), &Object{Class: Global{"mylab", "C"}, Kind: NewObj, Args: Tuple{int64(1)}}},
		{"torch rebuild stays inert", []byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2\nK\x01\x85R."),
			&Object{Class: Global{"torch._utils", "_rebuild_tensor_v2"}, Args: Tuple{int64(1)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sameValue(t, decodeOne(t, tc.in, Options{}), tc.want)
		})
	}
}

func TestDecodeCycles(t *testing.T) {
	// l = []; l.append(l)
	v := decodeOne(t, []byte("]2a."), Options{})
	l := v.(*List)
	if len(l.Items) != 1 || l.Items[0] != Value(l) {
		t.Fatalf("list does not contain itself: %v", l.Items)
	}
	// d = {}; d['a'] = d
	d := decodeOne(t, []byte("}q\x00X\x01\x00\x00\x00ah\x00s."), Options{}).(*Dict)
	if got, _ := d.Get("a"); got != Value(d) {
		t.Fatalf("dict does not contain itself")
	}
	// An object whose state refers to the object.
	o := decodeOne(t, []byte("cm\nC\n)\x81q\x00}X\x01\x00\x00\x00sh\x00sb."), Options{}).(*Object)
	if got, _ := o.State.(*Dict).Get("s"); got != Value(o) {
		t.Fatalf("object state does not contain the object")
	}
	// Canonical forms terminate on cycles.
	sameValue(t, l, l)
	sameValue(t, d, d)
}

func TestDecodeErrors(t *testing.T) {
	failingLoad := errors.New("no such storage")
	tests := []struct {
		name   string
		in     string
		opts   Options
		offset int64
		op     string
		msg    string
	}{
		{"unknown opcode", "\xff", Options{}, 0, "", "unknown opcode 0xff"},
		{"unknown printable opcode", "N\x00Z", Options{}, 1, "", "unknown opcode 0x00"},
		{"no STOP", "K\x01", Options{}, 2, "", "no STOP"},
		{"STOP on empty stack", ".", Options{}, 0, "STOP", "underflow"},
		{"APPEND underflow", "a.", Options{}, 0, "APPEND", "underflow"},
		{"TUPLE1 below MARK", "K\x01(\x85.", Options{}, 3, "TUPLE1", "underflow"},
		{"STOP below MARK", "K\x01(.", Options{}, 3, "STOP", "underflow"},
		{"POP_MARK without MARK", "1.", Options{}, 0, "POP_MARK", "could not find MARK"},
		{"memo miss", "h\x05.", Options{}, 0, "BINGET", "memo value not found at index 5"},
		{"negative PUT", "Np-1\n.", Options{}, 1, "PUT", "invalid memo index"},
		{"PUT on empty stack", "q\x00.", Options{}, 0, "BINPUT", "underflow"},
		{"STACK_GLOBAL non-str", "K\x01K\x02\x93.", Options{}, 4, "STACK_GLOBAL", "STACK_GLOBAL requires str"},
		{"APPEND to dict", "}K\x01a.", Options{}, 3, "APPEND", "cannot append to dict"},
		{"SETITEM on list", "]K\x01K\x02s.", Options{}, 5, "SETITEM", "cannot set items on list"},
		{"unhashable key", "}]K\x01s.", Options{}, 4, "SETITEM", "unhashable type: 'list'"},
		{"unhashable set item", "\x8f(]\x90.", Options{}, 3, "ADDITEMS", "unhashable type: 'list'"},
		{"odd DICT", "(K\x01d.", Options{}, 3, "DICT", "odd number"},
		{"protocol 6", "\x80\x06.", Options{}, 0, "PROTO", "unsupported pickle protocol: 6"},
		{"EXT1", "\x82\x01.", Options{}, 0, "EXT1", "extension"},
		{"NEXT_BUFFER", "\x97.", Options{}, 0, "NEXT_BUFFER", "out-of-band"},
		{"READONLY_BUFFER", "N\x98.", Options{}, 1, "READONLY_BUFFER", "out-of-band"},
		{"PERSID without PersistentLoad", "Pabc\n.", Options{}, 0, "PERSID", "PersistentLoad is nil"},
		{"PERSID non-ASCII", "P\xe9\n.", testOptions(), 0, "PERSID", "ASCII"},
		{"PersistentLoad error", "NQ.", Options{PersistentLoad: func(Value) (Value, error) { return nil, failingLoad }}, 1, "BINPERSID", "no such storage"},
		{"BUILD on list", "]Nb.", Options{}, 2, "BUILD", "BUILD on list"},
		{"REDUCE args not a tuple", "cm\nf\nK\x01R.", Options{}, 7, "REDUCE", "not a tuple"},
		{"REDUCE callable not a global", "K\x01)R.", Options{}, 3, "REDUCE", "not a global"},
		{"NEWOBJ class not a global", "K\x01)\x81.", Options{}, 3, "NEWOBJ", "not a global"},
		{"NEWOBJ_EX kwargs not a dict", "cm\nC\n)N\x92.", Options{}, 7, "NEWOBJ_EX", "not a dict"},
		{"OBJ without class", "(o.", Options{}, 1, "OBJ", "underflow"},
		{"OBJ class not a global", "(K\x01o.", Options{}, 3, "OBJ", "not a global"},
		{"STRING unquoted", "Sabc\n.", Options{}, 0, "STRING", "must be quoted"},
		{"STRING trailing backslash", "S'a\\'\n.", Options{}, 0, "STRING", "trailing \\"},
		{"STRING bad \\x", "S'\\x4'\n.", Options{}, 0, "STRING", "invalid \\x escape"},
		{"UNICODE truncated escape", "V\\u12\n.", Options{}, 0, "UNICODE", "truncated"},
		{"UNICODE out of range", "V\\U00110000\n.", Options{}, 0, "UNICODE", "out of range"},
		{"BINSTRING negative length", "T\xff\xff\xff\xff.", Options{}, 0, "BINSTRING", "negative byte count"},
		{"LONG4 negative length", "\x8b\xff\xff\xff\xff.", Options{}, 0, "LONG4", "negative byte count"},
		{"BINUNICODE invalid UTF-8", "X\x01\x00\x00\x00\xff.", Options{}, 0, "BINUNICODE", "invalid UTF-8"},
		{"BINUNICODE truncated", "X\x10\x00\x00\x00abc", Options{}, 0, "BINUNICODE", "unexpected EOF"},
		{"GLOBAL invalid UTF-8", "cm\xff\nf\n.", Options{}, 0, "GLOBAL", "UTF-8"},
		{"GLOBAL without newline", "cmodule", Options{}, 0, "GLOBAL", "no newline"},
		{"INT garbage", "Iabc\n.", Options{}, 0, "INT", "invalid integer literal"},
		{"FLOAT garbage", "Fabc\n.", Options{}, 0, "FLOAT", "invalid float literal"},
		{"ADDITEMS on frozenset", "(K\x01\x91(K\x02\x90.", Options{}, 7, "ADDITEMS", "not a set"},
		{"FRAME beyond data", "\x95\x10\x00\x00\x00\x00\x00\x00\x00N.", Options{}, 0, "FRAME", "unexpected EOF"},
		{"BINFLOAT truncated", "G\x00\x00", Options{}, 0, "BINFLOAT", "unexpected EOF"},
		{"dict key nested too deep", "}N" + strings.Repeat("\x85", 101) + "K\x01s.", Options{}, 105, "SETITEM", "nested deeper"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder([]byte(tc.in), tc.opts)
			v, err := d.Decode()
			var perr *ckpterr.FormatError
			if !errors.As(err, &perr) || perr.Format != Format || perr.File != "" {
				t.Fatalf("want a *ckpterr.FormatError of format %q, got %v (value %v)", Format, err, v)
			}
			if perr.Offset != tc.offset || perr.Item != tc.op || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %q (offset %d, op %q), want offset %d op %q containing %q", err, perr.Offset, perr.Item, tc.offset, tc.op, tc.msg)
			}
			if d.Offset() != tc.offset && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("Offset after error = %d, want %d", d.Offset(), tc.offset)
			}
			if tc.name == "PersistentLoad error" && !errors.Is(err, failingLoad) {
				t.Errorf("PersistentLoad error not wrapped: %v", err)
			}
		})
	}
	if _, err := NewDecoder(nil, Options{}).Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := NewDecoder(new(pb).op(opBinUnicode8).u64(1<<40).Bytes(), Options{}).Decode()
	want := `pickle: "BINUNICODE8": byte 0: string of 1099511627776 bytes exceeds limit MaxStringLen=268435456`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	// A limit exceeded is input ckpt declines to decode, not a broken pickle.
	if !errors.Is(err, ErrLimit) || !errors.Is(err, ckpterr.ErrUnsupported) || errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("%v: want ErrLimit and ErrUnsupported, not ErrCorrupt", err)
	}
	_, err = NewDecoder([]byte("K\x01"), Options{}).Decode()
	if !errors.Is(err, ckpterr.ErrCorrupt) || errors.Is(err, ckpterr.ErrUnsupported) {
		t.Errorf("truncated pickle: %v, want ErrCorrupt alone", err)
	}
}

func TestStrict(t *testing.T) {
	sd := stateDictPickle(3)
	if _, err := NewDecoder(sd, Options{Strict: true, PersistentLoad: func(pid Value) (Value, error) { return pid, nil }}).Decode(); err != nil {
		t.Fatalf("strict decode of a torch state_dict: %v", err)
	}
	custom := []byte("\x80\x04\x8c\x05mylab\x8c\x05Thing\x93)R.")
	if _, err := NewDecoder(custom, Options{Strict: true}).Decode(); !errors.Is(err, ErrNotAllowed) ||
		err.Error() != `pickle: "STACK_GLOBAL": byte 16: unsupported global: STACK_GLOBAL mylab.Thing` ||
		!errors.Is(err, ckpterr.ErrUnsupported) || errors.Is(err, ckpterr.ErrDangerous) || errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("strict without Allow: %v, want ErrUnsupported alone", err)
	}
	if _, err := NewDecoder(custom, Options{Strict: true, Allow: []Global{{"mylab", "Thing"}}}).Decode(); err != nil {
		t.Errorf("strict with Allow: %v", err)
	}
	evil := []byte("cos\nsystem\n(S'echo'\ntR.")
	_, err := NewDecoder(evil, Options{Strict: true, Allow: []Global{{"os", "system"}}}).Decode()
	if err == nil || err.Error() != `pickle: "GLOBAL": byte 0: unsupported global: GLOBAL os.system` ||
		!errors.Is(err, ckpterr.ErrDangerous) || errors.Is(err, ckpterr.ErrUnsupported) || errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("os.system allowed through Allow: %v, want ErrDangerous alone", err)
	}
	inst := []byte("(S'echo'\nios\nsystem\n.")
	if _, err := NewDecoder(inst, Options{Strict: true}).Decode(); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("INST os.system in strict mode: %v", err)
	}
}

func TestAllowed(t *testing.T) {
	yes := []Global{
		{"collections", "OrderedDict"}, {"torch._utils", "_rebuild_tensor_v2"}, {"torch._utils", "_rebuild_parameter"},
		{"torch", "FloatStorage"}, {"torch.cuda", "HalfStorage"}, {"torch.storage", "UntypedStorage"},
		{"torch", "float8_e4m3fn"}, {"torch", "float4_e2m1fn_x2"}, {"torch", "uint3"}, {"torch", "int7"}, {"torch", "bits16"},
		{"torch", "FloatTensor"}, {"torch.cuda.sparse", "FloatTensor"}, {"torch", "per_channel_affine_float_qparams"},
		{"torch._tensor", "_rebuild_from_type_v2"}, {"builtins", "frozenset"}, {"_codecs", "encode"}, {"torch", "Size"},
	}
	no := []Global{
		{"builtins", "eval"}, {"torch.sparse", "BoolTensor"}, {"torch.cuda", "QInt8Storage"}, {"__builtin__", "set"},
		{"collections", "defaultdict"}, {"torch._utils", "_rebuild_sparse_csr_tensor"}, {"torch", "load"},
	}
	for _, g := range yes {
		if !Allowed(g) {
			t.Errorf("Allowed(%s) = false", g)
		}
	}
	for _, g := range no {
		if Allowed(g) {
			t.Errorf("Allowed(%s) = true", g)
		}
	}
}

func TestDangerous(t *testing.T) {
	bad := []Global{
		{"os", "system"}, {"posix", "system"}, {"nt", "system"}, {"os.path", "join"}, {"subprocess", "Popen"},
		{"subprocess", "run"}, {"sys", "modules"}, {"builtins", "eval"}, {"builtins", "exec"}, {"builtins", "compile"},
		{"builtins", "getattr"}, {"builtins", "setattr"}, {"builtins", "__import__"}, {"builtins", "open"},
		{"__builtin__", "eval"}, {"__builtin__", "execfile"}, {"runpy", "_run_code"}, {"importlib", "import_module"},
		{"importlib.util", "spec_from_file_location"}, {"pickle", "loads"}, {"_pickle", "loads"}, {"cPickle", "loads"},
		{"marshal", "loads"}, {"shutil", "rmtree"}, {"socket", "socket"}, {"ctypes", "CDLL"}, {"code", "InteractiveInterpreter"},
		{"pty", "spawn"}, {"webbrowser", "open"}, {"types", "FunctionType"}, {"types", "CodeType"},
		{"operator", "attrgetter"}, {"operator", "methodcaller"}, {"functools", "partial"}, {"torch", "load"},
		{"torch.hub", "load"}, {"torch", "hub.load"}, {"torch.jit", "load"}, {"torch.storage", "_load_from_bytes"},
		{"codecs", "open"}, {"_codecs", "decode"}, {"builtins", "object.__subclasses__"}, {"pathlib", "Path.write_text"},
		{"numpy.testing._private.utils", "runstring"}, {"commands", "getoutput"}, {"timeit", "timeit"},
	}
	good := []Global{
		{"_codecs", "encode"}, {"collections", "OrderedDict"}, {"torch._utils", "_rebuild_tensor_v2"},
		{"builtins", "set"}, {"argparse", "Namespace"}, {"numpy.core.multiarray", "_reconstruct"},
		{"osmosis", "x"}, {"pathlib", "PosixPath"}, {"copyreg", "__newobj__"}, {"operator", "itemgetter"},
		{"mylab", "Outer.Inner"},
	}
	for _, g := range bad {
		if why, ok := Dangerous(g); !ok || why == "" {
			t.Errorf("Dangerous(%s) = %q, %v", g, why, ok)
		}
		if c, _ := Classify(g); c != Unsafe {
			t.Errorf("Classify(%s) = %v", g, c)
		}
	}
	for _, g := range good {
		if why, ok := Dangerous(g); ok {
			t.Errorf("Dangerous(%s) = %q", g, why)
		}
	}
	if c, _ := Classify(Global{"torch", "Size"}); c != SafeAllowed {
		t.Errorf("Classify(torch.Size) = %v", c)
	}
	if c, _ := Classify(Global{"mylab", "X"}); c != Unknown {
		t.Errorf("Classify(mylab.X) = %v", c)
	}
	if SafeAllowed.String() != "allowed" || Unknown.String() != "unknown" || Unsafe.String() != "dangerous" {
		t.Error("Safety.String")
	}
}

// Scan follows STACK_GLOBAL operands through the memo and flags operands it
// cannot see.
func TestScanStackGlobal(t *testing.T) {
	in := new(pb).proto(4).sstr("os").op(opMemoize).sstr("system").op(opMemoize).op(opStackGlobal, opMemoize, '0').
		op(opBinGet, 0).op(opBinGet, 1).op(opStackGlobal).sstr("x").op(opTuple1, opReduce).stop()
	rep, err := Scan(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Globals) != 2 || rep.Globals[1].Global != (Global{"os", "system"}) || rep.Globals[1].Offset != 23 || rep.Globals[1].Class != Unsafe {
		t.Errorf("globals %+v", rep.Globals)
	}
	dyn := new(pb).proto(4).int(1).sstr("system").op(opStackGlobal).op(opEmptyTuple, opReduce).stop()
	rep, _ = Scan(dyn)
	if len(rep.Globals) != 1 || rep.Globals[0].Class != Unsafe || !strings.Contains(rep.Globals[0].Why, "not string literals") {
		t.Errorf("dynamic STACK_GLOBAL: %+v", rep.Globals)
	}
	inst := []byte("(S'id'\nisubprocess\ncheck_output\n.")
	rep, err = Scan(inst)
	if err != nil || len(rep.Globals) != 1 || rep.Globals[0].Opcode != "INST" || rep.Globals[0].Class != Unsafe {
		t.Errorf("INST: %+v %v", rep, err)
	}
	if _, err := Scan(nil); !errors.Is(err, io.EOF) {
		t.Errorf("Scan(nil): %v", err)
	}
	if _, err := Scan([]byte("\xff")); err == nil || !strings.Contains(err.Error(), "unknown opcode") {
		t.Errorf("Scan unknown opcode: %v", err)
	}
}
