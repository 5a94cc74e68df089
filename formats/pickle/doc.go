// Package pickle decodes Python pickles as data, without executing anything.
//
// It implements every opcode of pickle protocols 0–5 over a fixed set of Go
// types (see [Value]). Where a pickle asks Python to call something (a
// global followed by REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ or BUILD), the
// decoder records the request as an inert [*Object]; nothing is imported,
// looked up or called. Only these pure-data constructors are decoded
// natively, because real checkpoints rely on them:
//
//   - collections.OrderedDict, Counter, defaultdict and builtins.dict →
//     [*Dict] (Class tells them apart; BUILD on a dict sets Dict.State, as
//     for the _metadata attribute of a torch state_dict);
//   - builtins.set and frozenset → [*Set]; builtins.list → [*List];
//     builtins.tuple → [Tuple]; builtins.complex → complex128;
//   - _codecs.encode(str, 'latin1'|'utf-8'|'ascii'), builtins.bytes and
//     bytearray → []byte;
//   - copyreg._reconstructor(cls, object, None), how protocols 0 and 1
//     pickle plain instances, → the same NEWOBJ [*Object] protocol 2 gives;
//     copyreg.__newobj__ and __newobj_ex__ likewise;
//   - numpy arrays, scalars and dtypes → [*NDArray] and [*NPDType].
//
// Calls with argument shapes Python's pickler never emits for these stay
// inert objects. Nothing else is interpreted: torch._utils._rebuild_tensor_v2
// and friends are *Object records for the torch reader to interpret.
//
// # Text
//
// Python 2 str values (STRING, BINSTRING, SHORT_BINSTRING) are decoded to Go
// strings as UTF-8 when valid, else as latin-1 (one code point per byte); a
// numpy array whose raw data was pickled as such a str gets its original
// bytes back. UNICODE uses raw-unicode-escape and the BIN*UNICODE opcodes
// UTF-8 with CPython's surrogatepass: surrogate pairs are combined and lone
// surrogates, which Go strings cannot hold, become U+FFFD. Text integers
// (INT, LONG) are read as signed decimals, which is all picklers write.
//
// # Safety
//
// Every allocation is bounded by [Limits]; lengths found in the input are
// checked against the limits and against the bytes actually present before
// anything is allocated. The decoder never recurses on values (dict-key
// hashing is depth- and size-capped), so cyclic structures are safe to
// build. Values may share structure and form cycles exactly as in Python:
// code walking them must track pointers it has seen. Every error is a
// [*ckpterr.FormatError] carrying the byte offset and name of the failing
// opcode (see [Format]).
//
// [Options.Strict] refuses, like torch.load(weights_only=True), any global
// outside [Allowed] and [Options.Allow]. [Scan] and [ScanOne] walk the opcodes
// without building values and list every global a pickle references,
// classified by [Classify] under a default-deny policy: allowed (torch's
// weights_only allowlist, [Allowed]), data (the pure-data reconstructors
// ckpt models, [IsModeled]), dangerous (a known gadget, [Dangerous], including
// gadgets reached through dotted names) and unknown — every other global and
// every other dotted name, which Python would import and call.
package pickle
