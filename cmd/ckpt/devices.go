package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/spf13/cobra"
)

// devicesReport is the --json output of ckpt devices.
type devicesReport struct {
	AcceleratorType string        `json:"accelerator_type"`
	Generation      string        `json:"generation"`
	Family          string        `json:"family,omitempty"`
	Topology        string        `json:"topology"`
	Chips           int           `json:"chips"`
	DevicesPerChip  int           `json:"devices_per_chip"`
	Devices         int           `json:"devices"`
	Hosts           int           `json:"hosts"`
	DevicesPerHost  int           `json:"devices_per_host"`
	HBMPerChip      int64         `json:"hbm_per_chip"`
	HBMPerDevice    int64         `json:"hbm_per_device"`
	NativeWeights   []string      `json:"native_weight_dtypes"`
	HostDevices     []hostDevices `json:"host_devices"`
}

// hostDevices is the range of devices (ranks) one host drives.
type hostDevices struct {
	Host  int `json:"host"`
	First int `json:"first"`
	Count int `json:"count"`
}

func newDevicesCmd() *cobra.Command {
	var topology string
	var asJSON bool
	cmd := &cobra.Command{
		Use: "devices --topology T",
		Example: `  ckpt devices --topology v6e-8
  ckpt devices --topology v5p:2x2x4 --json
  ckpt devices --topology "$TORCH_TPU_TOPOLOGY"`,
		Short: "Describe a TPU slice: hosts, chips, devices, HBM per device",
		Long: `devices describes the TPU slice --topology names: an accelerator type (v5p-32,
v5litepod-16, v6e-8, v4-8, tpu7x-8 — the number counts TensorCores on v4, v5p and TPU7x,
chips on v5e and v6e), GEN:AxBxC chips per axis (v5p:2x2x2, v6e:4x4) or TorchTPU's
TORCH_TPU_TOPOLOGY, GEN:a,b,c (v6e:2,4,1; TPU7x adds the 2 cores per chip: tpu7x:2,2,1,2).
It prints the chips, the devices they make (one TorchTPU process each; a TPU7x chip is two
devices), the hosts and which devices (ranks) each drives, the HBM of one device, and the
weight dtypes the matrix units take natively.`,
		Args: positional("", "ckpt devices --topology v6e-8"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := runtime.ParseTopology(topology)
			if err != nil {
				return usage(fmt.Errorf("--topology: %w", err))
			}
			rep := devicesReport{
				AcceleratorType: t.AcceleratorType(), Generation: t.Gen.Name, Family: t.Gen.Family, Topology: t.ShapeString(),
				Chips: t.Chips, DevicesPerChip: t.Gen.DevicesPerChip, Devices: t.Devices, Hosts: t.Hosts,
				DevicesPerHost: t.DevicesPerHost(), HBMPerChip: t.Gen.HBMPerChip, HBMPerDevice: t.HBMPerDevice(),
			}
			for _, d := range statedict.DTypes() {
				if t.Gen.NativeWeight(d) {
					rep.NativeWeights = append(rep.NativeWeights, d.String())
				}
			}
			for h := range t.Hosts {
				first, n := t.HostDevices(h)
				rep.HostDevices = append(rep.HostDevices, hostDevices{h, first, n})
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printDevices(cmd.OutOrStdout(), &rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&topology, "topology", "", "the TPU slice: v5p-32, v6e:4x4, tpu7x:2,2,1,2, …")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the description as JSON")
	cmd.MarkFlagRequired("topology")
	completeTopology(cmd)
	return cmd
}

func printDevices(w io.Writer, r *devicesReport) {
	gen := "TPU " + r.Generation
	if r.Family != "" {
		gen += " (" + r.Family + ")"
	}
	fmt.Fprintf(w, "%s: %s, topology %s\n", r.AcceleratorType, gen, r.Topology)
	fmt.Fprintf(w, "  chips            %d\n", r.Chips)
	fmt.Fprintf(w, "  devices          %d (%d per chip; one TorchTPU process each)\n", r.Devices, r.DevicesPerChip)
	fmt.Fprintf(w, "  hosts            %d (%d devices each)\n", r.Hosts, r.DevicesPerHost)
	fmt.Fprintf(w, "  HBM per device   %s (%s per chip)\n", humanBytes(r.HBMPerDevice), humanBytes(r.HBMPerChip))
	fmt.Fprintf(w, "  native weights   %s\n", strings.Join(r.NativeWeights, ", "))
	const show = 8
	for i, h := range r.HostDevices {
		if i == show && len(r.HostDevices) > show+1 {
			fmt.Fprintf(w, "  …                (hosts %d–%d alike)\n", show, len(r.HostDevices)-2)
			continue
		}
		if i > show && i < len(r.HostDevices)-1 {
			continue
		}
		fmt.Fprintf(w, "  host %-11d devices %d–%d\n", h.Host, h.First, h.First+h.Count-1)
	}
}
