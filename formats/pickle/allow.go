package pickle

import (
	"fmt"
	"strings"
)

// Allowed reports whether g is in the default allowlist of torch's
// weights_only unpickler (torch 2.x, _weights_only_unpickler._get_allowed_globals):
// collections.OrderedDict and Counter, torch.nn.parameter.Parameter,
// torch.serialization._get_layout, torch.Size, torch.Tensor, torch.device,
// _codecs.encode, builtins.bytearray, set, frozenset and complex, every
// torch dtype, the legacy torch.*Storage / torch.cuda.*Storage classes,
// torch.storage.TypedStorage and UntypedStorage, the legacy tensor classes
// (torch.FloatTensor, torch.cuda.*, torch.sparse.*), the qschemes, the
// torch._utils._rebuild_* functions and torch._tensor._rebuild_from_type_v2.
// builtins.frozenset is the one addition to torch's list (pure data).
func Allowed(g Global) bool {
	_, ok := allowlist[g]
	return ok
}

// neverAllowed are the modules torch refuses even when a caller allowlists
// one of their names.
var neverAllowed = map[string]bool{"sys": true, "os": true, "posix": true, "nt": true}

var allowlist = buildAllowlist()

func buildAllowlist() map[Global]struct{} {
	m := map[Global]struct{}{}
	add := func(module string, names ...string) {
		for _, n := range names {
			m[Global{module, n}] = struct{}{}
		}
	}
	add("collections", "OrderedDict", "Counter")
	add("torch.nn.parameter", "Parameter")
	add("torch.serialization", "_get_layout")
	add("torch", "Size", "Tensor", "device")
	add("_codecs", "encode")
	add("builtins", "bytearray", "set", "frozenset", "complex")
	// Dtypes: keys of _dtype_to_storage_type_map(), _new_dtypes(), uint1..7, int1..7.
	add("torch", "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
		"int8", "uint8", "bool", "complex128", "complex64", "complex32", "bcomplex32",
		"qint8", "quint8", "qint32", "quint4x2", "quint2x4",
		"float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
		"float8_e8m0fnu", "float4_e2m1fn_x2", "uint16", "uint32", "uint64",
		"bits8", "bits16", "bits1x8", "bits2x4", "bits4x2")
	for i := 1; i <= 7; i++ {
		add("torch", fmt.Sprintf("uint%d", i), fmt.Sprintf("int%d", i))
	}
	// torch._storage_classes.
	storages := []string{"Double", "Float", "Half", "BFloat16", "Long", "Int", "Short",
		"Char", "Byte", "Bool", "ComplexDouble", "ComplexFloat"}
	for _, s := range storages {
		add("torch", s+"Storage")
		add("torch.cuda", s+"Storage")
	}
	add("torch", "QUInt8Storage", "QInt8Storage", "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage")
	add("torch.storage", "TypedStorage", "UntypedStorage")
	// torch._tensor_classes: CPU, CUDA, SparseCPU, SparseCUDA legacy types
	// (there is no sparse BoolTensor).
	for _, s := range []string{"Byte", "Char", "Double", "Float", "Int", "Long", "Short", "Half", "Bool", "BFloat16"} {
		add("torch", s+"Tensor")
		add("torch.cuda", s+"Tensor")
		if s != "Bool" {
			add("torch.sparse", s+"Tensor")
			add("torch.cuda.sparse", s+"Tensor")
		}
	}
	add("torch", "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
		"per_channel_symmetric", "per_channel_affine_float_qparams")
	add("torch._utils", "_rebuild_parameter", "_rebuild_parameter_with_state",
		"_rebuild_qtensor", "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
		"_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage", "_rebuild_nested_tensor",
		"_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
		"_rebuild_device_tensor_from_cpu_tensor")
	add("torch._tensor", "_rebuild_from_type_v2")
	// DTensor and what it pickles with: torch.distributed.tensor (and device_mesh) add
	// them with add_safe_globals when imported, as any program that saved one has.
	add("torch.distributed.tensor", "DTensor")
	add("torch.distributed.tensor._dtensor_spec", "DTensorSpec", "TensorMeta", "ShardOrderEntry")
	add("torch.distributed.tensor.placement_types", "Shard", "Replicate", "Partial", "_StridedShard")
	add("torch.distributed.device_mesh", "DeviceMesh")
	add("torch.distributed._mesh_layout", "_MeshLayout", "_FlatLayout")
	return m
}

// Safety classifies a global for [Scan]. The classes are ordered by severity.
type Safety int

const (
	// SafeAllowed: in the torch weights_only allowlist ([Allowed]).
	SafeAllowed Safety = iota
	// Modeled: not in torch's allowlist, but one of the pure-data reconstructors this
	// package and ckpt's readers interpret as data ([IsModeled]): builtin containers,
	// copyreg's instance protocol, numpy arrays and dtypes, argparse.Namespace. Python
	// would import and call them, and they only build data.
	Modeled
	// Unknown: neither allowlisted, modeled nor a known gadget. This package only
	// records such globals inertly; Python would import and maybe call them, running
	// whatever code they are.
	Unknown
	// Unsafe: a known code-execution, file-system, network or process
	// gadget ([Dangerous]). Loading the pickle with Python's pickle module
	// would run it.
	Unsafe
)

// String returns "allowed", "data", "unknown" or "dangerous".
func (s Safety) String() string {
	switch s {
	case SafeAllowed:
		return "allowed"
	case Modeled:
		return "data"
	case Unknown:
		return "unknown"
	case Unsafe:
		return "dangerous"
	}
	return fmt.Sprintf("Safety(%d)", int(s))
}

// Severity says what loading the global with Python's pickle means: "" for the allowed and
// modeled classes, "would import and call unknown code" for Unknown and "known code
// execution" for Unsafe.
func (s Safety) Severity() string {
	switch s {
	case Unknown:
		return "would import and call unknown code"
	case Unsafe:
		return "known code execution"
	}
	return ""
}

// Refused reports whether a scan policy refuses the class: everything but the allowlist
// and the modeled pure-data reconstructors (default deny).
func (s Safety) Refused() bool { return s >= Unknown }

// Classify returns the safety class of g and, for dangerous globals, the
// reason. The policy is default-deny: only the exact names of [Allowed] and
// [IsModeled] pass; every other global, and every dotted (protocol 4 qualified)
// name, is Unknown or, when it reaches a known gadget, Unsafe.
func Classify(g Global) (Safety, string) {
	if why, bad := Dangerous(g); bad {
		return Unsafe, why
	}
	m := mapGlobal(g)
	if Allowed(m) {
		return SafeAllowed, ""
	}
	if IsModeled(m) {
		return Modeled, ""
	}
	return Unknown, ""
}

// IsModeled reports whether g is one of the pure-data reconstructors ckpt interprets as
// data although torch's weights_only allowlist lacks them: the builtin containers and
// constructors the decoder builds natively (dict, list, tuple, bytes,
// collections.defaultdict), copyreg's instance protocol (_reconstructor with its base
// builtins.object, __newobj__, __newobj_ex__: they only call the class the pickle names,
// which is classified on its own), numpy arrays, scalars and dtypes, and
// argparse.Namespace (an attribute bag; convert turns it into a dict), io.BytesIO (an
// in-memory byte buffer, as Megatron-core saves module extra state). g is given after
// Python 2→3 renaming. Readers of other formats add their own data classes (DCP's
// metadata dataclasses) to a scan's policy.
func IsModeled(g Global) bool {
	_, ok := modeled[g]
	return ok
}

var modeled = func() map[Global]struct{} {
	m := map[Global]struct{}{}
	add := func(module string, names ...string) {
		for _, n := range names {
			m[Global{module, n}] = struct{}{}
		}
	}
	add("builtins", "dict", "list", "tuple", "bytes", "object")
	add("collections", "defaultdict")
	add("copyreg", "_reconstructor", "__newobj__", "__newobj_ex__")
	add("numpy", "dtype", "ndarray")
	for _, core := range []string{"numpy.core", "numpy._core"} {
		add(core+".multiarray", "_reconstruct", "scalar")
		add(core+".numeric", "_frombuffer")
	}
	add("argparse", "Namespace")
	// An in-memory byte buffer: BytesIO(initial) and __setstate__((bytes, position, dict)).
	// Megatron-core and Transformer Engine save module extra state as one.
	add("_io", "BytesIO")
	add("io", "BytesIO")
	return m
}()

// Dangerous reports whether g, if resolved and called by Python's
// unpickler, can run code, touch files, processes or the network, or load
// another pickle; why says how. It matches exact names (builtins.eval,
// builtins.getattr, functools.partial, torch.load, ...), whole modules and
// their submodules (os, posix, nt, subprocess, sys, runpy, importlib,
// pickle, marshal, shutil, socket, ctypes, code, pty, webbrowser, codecs,
// torch.hub, torch.jit, ...), dotted names reaching a dunder attribute
// (Foo.__subclasses__), and Python 2 spellings (__builtin__.eval).
func Dangerous(g Global) (why string, ok bool) {
	if IsModeled(mapGlobal(g)) {
		return "", false // pure data, even in a module of gadgets (_io.BytesIO)
	}
	for _, c := range []Global{g, mapGlobal(g)} {
		if why, ok := dangerousPath(c); ok {
			return why, true
		}
	}
	return "", false
}

func dangerousPath(g Global) (string, bool) {
	// Every dotted prefix of the whole name: a module, a submodule, or a module-level name
	// reached through a dotted (protocol 4) qualified name.
	if why, ok := dangerousPrefix(g.Module + "." + g.Name); ok {
		return why, true
	}
	// A dotted name is attribute traversal from the module: torch.serialization + os.system
	// is os.system, reached through a module that imported it, and tempfile + _os.system
	// the same under an alias. Every tail of the name from one of its segments on is
	// checked like a name of its own (leading underscores dropped from its first segment).
	if segs := strings.Split(g.Name, "."); len(segs) > 1 {
		for i := 0; i < len(segs)-1; i++ {
			tail := strings.TrimLeft(segs[i], "_") + "." + strings.Join(segs[i+1:], ".")
			if why, ok := dangerousPrefix(tail); ok {
				return fmt.Sprintf("%s (reached as %s)", why, g), true
			}
		}
	}
	if g.Module == "_codecs" && g.Name != "encode" {
		return "_codecs: codec machinery beyond _codecs.encode", true
	}
	if strings.Contains(g.Name, ".") {
		for _, seg := range strings.Split(g.Name, ".") {
			if strings.HasPrefix(seg, "__") && strings.HasSuffix(seg, "__") {
				return "dotted name reaches the dunder attribute " + seg + " (attribute traversal)", true
			}
		}
		if g.Module == "pathlib" || g.Module == "pathlib._local" {
			return "pathlib method (file-system access)", true
		}
	}
	return "", false
}

// dangerousPrefix checks every dotted prefix of full against the gadget modules and names.
func dangerousPrefix(full string) (string, bool) {
	for i := 0; i <= len(full); i++ {
		if i < len(full) && full[i] != '.' {
			continue
		}
		prefix := full[:i]
		if why, ok := dangerousModules[prefix]; ok {
			return why, true
		}
		if j := strings.LastIndexByte(prefix, '.'); j > 0 {
			if why, ok := dangerousNames[Global{prefix[:j], prefix[j+1:]}]; ok {
				return why, true
			}
		}
	}
	return "", false
}

// dangerousModules are modules all of whose names are gadgets.
var dangerousModules = map[string]string{
	"os":                                    "os: process, file-system and environment access (os.system, os.remove, ...)",
	"posix":                                 "posix: os.system and friends (module of os functions on Unix)",
	"nt":                                    "nt: os.system and friends (module of os functions on Windows)",
	"subprocess":                            "subprocess: runs programs",
	"_posixsubprocess":                      "_posixsubprocess: spawns processes",
	"pty":                                   "pty: spawns processes",
	"commands":                              "commands: runs shell commands (Python 2)",
	"popen2":                                "popen2: runs shell commands (Python 2)",
	"multiprocessing":                       "multiprocessing: spawns processes",
	"asyncio":                               "asyncio: subprocess and network access",
	"signal":                                "signal: sends signals to processes",
	"sys":                                   "sys: interpreter state (sys.modules, sys.exit, ...)",
	"runpy":                                 "runpy: runs modules and scripts",
	"importlib":                             "importlib: imports arbitrary code",
	"imp":                                   "imp: imports arbitrary code",
	"pkgutil":                               "pkgutil: resolves and imports arbitrary names",
	"zipimport":                             "zipimport: imports code from archives",
	"code":                                  "code: interactive interpreter, runs source",
	"codeop":                                "codeop: compiles source",
	"timeit":                                "timeit: executes source strings",
	"trace":                                 "trace: executes source strings",
	"profile":                               "profile: executes source strings",
	"cProfile":                              "cProfile: executes source strings",
	"pdb":                                   "pdb: debugger, executes source",
	"bdb":                                   "bdb: debugger, executes source",
	"pydoc":                                 "pydoc: spawns pagers, imports modules",
	"marshal":                               "marshal: loads code objects",
	"pickle":                                "pickle: loads nested pickles",
	"_pickle":                               "_pickle: loads nested pickles",
	"cPickle":                               "cPickle: loads nested pickles",
	"dill":                                  "dill: loads nested pickles and code",
	"cloudpickle":                           "cloudpickle: rebuilds functions from code",
	"joblib":                                "joblib: loads nested pickles",
	"shelve":                                "shelve: loads pickles from files",
	"ctypes":                                "ctypes: native code and memory access",
	"_ctypes":                               "_ctypes: native code and memory access",
	"cffi":                                  "cffi: native code access",
	"shutil":                                "shutil: file-system changes",
	"socket":                                "socket: network access",
	"_socket":                               "_socket: network access",
	"ssl":                                   "ssl: network access",
	"socketserver":                          "socketserver: network servers",
	"http":                                  "http: network access",
	"urllib":                                "urllib: network access",
	"urllib2":                               "urllib2: network access",
	"urllib3":                               "urllib3: network access",
	"requests":                              "requests: network access",
	"ftplib":                                "ftplib: network access",
	"smtplib":                               "smtplib: network access",
	"telnetlib":                             "telnetlib: network access",
	"xmlrpc":                                "xmlrpc: network access",
	"webbrowser":                            "webbrowser: launches programs",
	"codecs":                                "codecs: file access and codec machinery",
	"_io":                                   "_io: file access",
	"numpy.f2py":                            "numpy.f2py: compiles and loads code",
	"numpy.ctypeslib":                       "numpy.ctypeslib: loads native libraries",
	"torch.hub":                             "torch.hub: downloads and runs code",
	"torch.jit":                             "torch.jit: loads TorchScript (arbitrary code)",
	"torch.package":                         "torch.package: loads packaged code",
	"torch.utils.cpp_extension":             "torch.utils.cpp_extension: compiles and loads native code",
	"torch._inductor":                       "torch._inductor: compiles and loads generated code",
	"torch.distributed.rpc":                 "torch.distributed.rpc: remote calls",
	"torch.fx.experimental.symbolic_shapes": "torch.fx.experimental.symbolic_shapes: evaluates guard expressions with eval",
	"torch.utils.collect_env":               "torch.utils.collect_env: runs shell commands (run, run_and_read_all)",
	"_osx_support":                          "_osx_support: runs shell commands (_read_output, _find_build_tool)",
	"_aix_support":                          "_aix_support: runs shell commands",
	"distutils":                             "distutils: spawns compilers and commands",
	"setuptools":                            "setuptools: runs builds and commands",
	"pip":                                   "pip: installs and runs packages",
	"ensurepip":                             "ensurepip: runs pip",
	"venv":                                  "venv: creates environments, runs commands",
	"doctest":                               "doctest: executes source strings",
	"idlelib":                               "idlelib: runs source and subprocesses",
}

// dangerousNames are single gadgets in otherwise harmless modules.
var dangerousNames = map[Global]string{
	{"builtins", "eval"}:                          "builtins.eval: executes source",
	{"builtins", "exec"}:                          "builtins.exec: executes source",
	{"builtins", "execfile"}:                      "builtins.execfile: executes a file (Python 2)",
	{"builtins", "compile"}:                       "builtins.compile: compiles source",
	{"builtins", "__import__"}:                    "builtins.__import__: imports arbitrary modules",
	{"builtins", "reload"}:                        "builtins.reload: re-imports modules (Python 2)",
	{"builtins", "getattr"}:                       "builtins.getattr: reaches any attribute (e.g. os.system)",
	{"builtins", "setattr"}:                       "builtins.setattr: mutates any object",
	{"builtins", "delattr"}:                       "builtins.delattr: mutates any object",
	{"builtins", "globals"}:                       "builtins.globals: exposes interpreter state",
	{"builtins", "locals"}:                        "builtins.locals: exposes interpreter state",
	{"builtins", "vars"}:                          "builtins.vars: exposes object internals",
	{"builtins", "open"}:                          "builtins.open: file access",
	{"builtins", "file"}:                          "builtins.file: file access (Python 2)",
	{"builtins", "breakpoint"}:                    "builtins.breakpoint: starts a debugger",
	{"builtins", "input"}:                         "builtins.input: reads the terminal (evaluates in Python 2)",
	{"builtins", "raw_input"}:                     "builtins.raw_input: reads the terminal",
	{"builtins", "help"}:                          "builtins.help: spawns a pager",
	{"builtins", "exit"}:                          "builtins.exit: stops the interpreter",
	{"builtins", "quit"}:                          "builtins.quit: stops the interpreter",
	{"builtins", "apply"}:                         "builtins.apply: calls any callable (Python 2)",
	{"io", "open"}:                                "io.open: file access",
	{"io", "open_code"}:                           "io.open_code: file access",
	{"io", "FileIO"}:                              "io.FileIO: file access",
	{"types", "FunctionType"}:                     "types.FunctionType: builds functions from code objects",
	{"types", "LambdaType"}:                       "types.LambdaType: builds functions from code objects",
	{"types", "CodeType"}:                         "types.CodeType: builds code objects",
	{"types", "MethodType"}:                       "types.MethodType: binds callables",
	{"types", "new_class"}:                        "types.new_class: calls a class-body callable",
	{"operator", "attrgetter"}:                    "operator.attrgetter: reaches any attribute",
	{"operator", "methodcaller"}:                  "operator.methodcaller: calls any method",
	{"operator", "call"}:                          "operator.call: calls any callable",
	{"_operator", "attrgetter"}:                   "_operator.attrgetter: reaches any attribute",
	{"_operator", "methodcaller"}:                 "_operator.methodcaller: calls any method",
	{"_operator", "call"}:                         "_operator.call: calls any callable",
	{"functools", "partial"}:                      "functools.partial: binds arguments to any callable",
	{"functools", "partialmethod"}:                "functools.partialmethod: binds arguments to any callable",
	{"functools", "reduce"}:                       "functools.reduce: calls any callable repeatedly",
	{"_functools", "partial"}:                     "_functools.partial: binds arguments to any callable",
	{"_functools", "reduce"}:                      "_functools.reduce: calls any callable repeatedly",
	{"platform", "popen"}:                         "platform.popen: runs shell commands (old Pythons)",
	{"numpy", "load"}:                             "numpy.load: loads pickles from files",
	{"uuid", "_get_command_stdout"}:               "uuid._get_command_stdout: runs commands",
	{"numpy.testing._private.utils", "runstring"}: "numpy runstring: executes source",
	{"torch", "load"}:                             "torch.load: loads nested checkpoints (possibly with weights_only=False)",
	{"torch.serialization", "load"}:               "torch.serialization.load: loads nested checkpoints",
	{"torch.serialization", "_load"}:              "torch.serialization._load: loads nested checkpoints",
	{"torch.serialization", "_legacy_load"}:       "torch.serialization._legacy_load: loads nested checkpoints",
	{"torch.storage", "_load_from_bytes"}:         "torch.storage._load_from_bytes: torch.load with weights_only=False",
	{"yaml", "load"}:                              "yaml.load: constructs arbitrary objects",
	{"yaml", "unsafe_load"}:                       "yaml.unsafe_load: constructs arbitrary objects",
}
