package pickle

import "testing"

// TestPolicy: the default-deny classes, including the gadgets that used to pass as unknown
// (issue 14) when reached through dotted names or modules outside the old lists.
func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		g    Global
		want Safety
	}{
		{Global{"torch._utils", "_rebuild_tensor_v2"}, SafeAllowed},
		{Global{"collections", "OrderedDict"}, SafeAllowed},
		{Global{"numpy.core.multiarray", "_reconstruct"}, Modeled},
		{Global{"numpy._core.multiarray", "scalar"}, Modeled},
		{Global{"numpy", "dtype"}, Modeled},
		{Global{"argparse", "Namespace"}, Modeled},
		{Global{"copyreg", "_reconstructor"}, Modeled},
		{Global{"__builtin__", "object"}, Modeled},
		{Global{"mylab", "Net"}, Unknown},
		{Global{"torch.nn.modules.linear", "Linear"}, Unknown},
		{Global{"torch", "Size.__new__"}, Unsafe},
		{Global{"collections", "OrderedDict.fromkeys"}, Unknown},
		{Global{"torch.serialization", "os.system"}, Unsafe},
		{Global{"tempfile", "_os.system"}, Unsafe},
		{Global{"torch", "os.system"}, Unsafe},
		{Global{"torch.serialization", "pickle.loads"}, Unsafe},
		{Global{"pickle", "loads"}, Unsafe},
		{Global{"_osx_support", "_read_output"}, Unsafe},
		{Global{"torch.utils.collect_env", "run"}, Unsafe},
		{Global{"mylab.code", "Outer.Inner"}, Unknown},
	} {
		got, why := Classify(tc.g)
		if got != tc.want || (got == Unsafe) != (why != "") {
			t.Errorf("Classify(%s) = %v %q, want %v", tc.g, got, why, tc.want)
		}
		if got.Refused() != (tc.want >= Unknown) {
			t.Errorf("%s: Refused() = %v", tc.g, got.Refused())
		}
	}
	if Unknown.Severity() != "would import and call unknown code" || Unsafe.Severity() != "known code execution" || Modeled.Severity() != "" {
		t.Error("Severity")
	}
}
