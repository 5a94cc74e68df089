package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/spf13/pflag"
)

// shardFlags are convert's flags for per-device and multi-host outputs.
type shardFlags struct {
	topology, mesh, plan string
	hostIndex, numHosts  int
	wait                 time.Duration
}

func (s *shardFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.topology, "topology", "", "the TPU slice to shard for: v5p-32, v6e:4x4, tpu7x:2,2,1,2, … (see ckpt devices)")
	f.StringVar(&s.mesh, "mesh", "", "write one file per device, sharded over this logical mesh (outermost axis first): fsdp=8, dp=2,fsdp=2,tp=2 (default with --topology: fsdp over every device)")
	f.StringVar(&s.plan, "plan", "", "JSON plan file whose rules override the built-in placements by tensor name (see ckpt plan)")
	f.IntVar(&s.hostIndex, "host-index", 0, "this host's index in a multi-host conversion (default: $JOB_COMPLETION_INDEX, else $TPU_WORKER_ID)")
	f.IntVar(&s.numHosts, "num-hosts", 0, "the hosts of a multi-host conversion, each writing its devices' files (default: the hosts in $TPU_WORKER_HOSTNAMES, else the topology's when a host index is set)")
	f.DurationVar(&s.wait, "host-wait", convert.DefaultHostWait, "how long host 0 waits for the other hosts before giving up")
}

// apply builds opts.Target, in one step, from the target spec of the other flags (device,
// generation, map_location) with the slice, mesh and plan of these, and fills opts.Hosts
// from the flags and the environment of a multi-host job (getenv): a Kubernetes Indexed Job
// or JobSet sets JOB_COMPLETION_INDEX, GKE's TPU webhook TPU_WORKER_ID and
// TPU_WORKER_HOSTNAMES.
func (s *shardFlags) apply(flags *pflag.FlagSet, opts *convert.Options, spec runtime.Spec, getenv func(string) string) error {
	spec.Topology, spec.Mesh = s.topology, s.mesh
	if s.plan != "" {
		var err error
		if spec.Plan, err = runtime.LoadPlan(s.plan); err != nil {
			return err
		}
	}
	var err error
	if opts.Target, err = newTarget(spec); err != nil {
		return err
	}
	if opts.Target.Mesh == nil {
		for _, name := range []string{"plan", "host-index", "num-hosts"} {
			if flags.Changed(name) {
				return usage(fmt.Errorf("--%s needs --mesh (or --topology): it applies to per-device outputs", name))
			}
		}
		return nil
	}
	topo := opts.Target.Topology
	h := convert.Hosts{Index: s.hostIndex, Count: s.numHosts, Wait: s.wait}
	from := ""
	if !flags.Changed("host-index") {
		for _, name := range []string{"JOB_COMPLETION_INDEX", "TPU_WORKER_ID"} {
			if v := getenv(name); v != "" {
				if h.Index, err = strconv.Atoi(v); err != nil || h.Index < 0 {
					return fmt.Errorf("$%s=%q is not a host index", name, v)
				}
				from = name
				break
			}
		}
	}
	if !flags.Changed("num-hosts") {
		switch names := getenv("TPU_WORKER_HOSTNAMES"); {
		case names != "":
			h.Count = len(strings.Split(names, ","))
		case from != "" && topo != nil:
			h.Count = topo.Hosts
		case from != "":
			return usage(fmt.Errorf("$%s=%d is set: give the number of hosts (the Job's completions) with --num-hosts", from, h.Index))
		}
	}
	switch {
	case flags.Changed("num-hosts") && h.Count < 1:
		return usage(fmt.Errorf("--num-hosts %d: a conversion has at least 1 host", h.Count))
	case flags.Changed("host-index") && h.Index < 0:
		return usage(fmt.Errorf("--host-index %d: hosts count from 0", h.Index))
	case h.Count <= 1 && h.Index != 0:
		return usage(fmt.Errorf("host index %d of %d hosts: give --num-hosts", h.Index, max(h.Count, 1)))
	case h.Index >= h.Count && flags.Changed("host-index"):
		return usage(fmt.Errorf("--host-index %d of %d hosts: hosts count from 0 to %d", h.Index, h.Count, h.Count-1))
	}
	opts.Hosts = h
	return nil
}

// printHost says what a host of a multi-host conversion did.
func printHost(out io.Writer, sum *convert.Summary) {
	h := sum.Host
	switch {
	case h.AlreadyDone:
		fmt.Fprintf(out, "host %d of %d: %s is already complete (this conversion's manifest is there); nothing to do\n", h.Index, h.Count, sum.Dst)
		return
	case h.Sealed:
		fmt.Fprintf(out, "host %d of %d: wrote the files of ranks %s (%d files, %s)\n", h.Index, h.Count, rankList(h.Ranks), len(h.Files), humanBytes(h.Bytes))
	default:
		fmt.Fprintf(out, "host %d of %d: its files (ranks %s) were written by an earlier run\n", h.Index, h.Count, rankList(h.Ranks))
	}
	if h.Finished {
		fmt.Fprintf(out, "host 0: every host finished (waited %.1fs); wrote %s (%s, %d tensors on %d ranks) in %.2fs; manifest %s\n",
			h.Waited, sum.Dst, sum.Format, sum.Tensors, sum.Sharding.Ranks, sum.Seconds, sum.Manifest)
	} else {
		fmt.Fprintf(out, "host %d: done in %.2fs; host 0 finishes %s once every host has\n", h.Index, sum.Seconds, sum.Dst)
	}
}

// rankList writes consecutive ranks as a range.
func rankList(r []int) string {
	if len(r) > 1 && r[len(r)-1]-r[0] == len(r)-1 {
		return fmt.Sprintf("%d-%d", r[0], r[len(r)-1])
	}
	return strings.Trim(fmt.Sprint(r), "[]")
}

// targetFlags name the flag that sets each field of a runtime.Spec.
var targetFlags = map[string]string{"device": "--to", "generation": "--tpu-gen", "topology": "--topology", "mesh": "--mesh",
	"plan": "--plan", "map_location": "--map-location"}

// newTarget builds the target spec names, a mistake in it a usage error naming its flag.
func newTarget(spec runtime.Spec) (*runtime.Target, error) {
	t, err := runtime.NewTarget(spec)
	var se *runtime.SpecError
	if errors.As(err, &se) {
		return nil, usage(fmt.Errorf("%s: %w", targetFlags[se.Field], se.Err))
	}
	return t, err
}
