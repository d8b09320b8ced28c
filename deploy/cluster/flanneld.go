package main

// flanneld is flannel's daemon cut down to what vkvm's container nodes use: the
// Kubernetes subnet manager (each node's lease is its spec.podCIDR) and the
// host-gw backend (a route per node's range via that node's address). Flannel's
// own main package cannot be imported, and its other backends would bring cloud
// SDKs into the binary; the steps below are the ones its main.go takes for this
// configuration, in the same order.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/flannel-io/flannel/pkg/backend"
	_ "github.com/flannel-io/flannel/pkg/backend/hostgw" // registers "host-gw"
	"github.com/flannel-io/flannel/pkg/ipmatch"
	"github.com/flannel-io/flannel/pkg/subnet/kube"
	"github.com/flannel-io/flannel/pkg/trafficmngr/iptables"
)

func runFlanneld(args []string) int {
	fs := flag.NewFlagSet("flanneld", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the node (required)")
	nodeName := fs.String("node-name", "", "this node's Node name (required)")
	iface := fs.String("iface", "", "interface or address other nodes reach this node on (required)")
	netConf := fs.String("net-conf", "", "flannel's net-conf.json: Network and Backend (required)")
	subnetFile := fs.String("subnet-file", "/run/flannel/subnet.env", "where the node's lease is written for the CNI configuration")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for name, v := range map[string]string{"kubeconfig": *kubeconfig, "node-name": *nodeName, "iface": *iface, "net-conf": *netConf} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "flanneld: --%s is required\n", name)
			return 2
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := flanneld(ctx, *kubeconfig, *nodeName, *iface, *netConf, *subnetFile); err != nil {
		fmt.Fprintf(os.Stderr, "flanneld: %v\n", err)
		return 1
	}
	return 0
}

func flanneld(ctx context.Context, kubeconfig, nodeName, iface, netConf, subnetFile string) error {
	// The subnet manager finds its Node by this variable only.
	if err := os.Setenv("NODE_NAME", nodeName); err != nil {
		return err
	}
	sm, err := kube.NewSubnetManager(ctx, "", kubeconfig, "flannel.alpha.coreos.com", netConf, false)
	if err != nil {
		return fmt.Errorf("subnet manager: %w", err)
	}
	config, err := sm.GetNetworkConfig(ctx)
	if err != nil {
		return fmt.Errorf("network config: %w", err)
	}
	if config.BackendType != "host-gw" {
		return fmt.Errorf("net-conf Backend.Type is %q; this flanneld has only host-gw", config.BackendType)
	}
	ipStack, err := ipmatch.GetIPFamily(config.EnableIPv4, config.EnableIPv6)
	if err != nil {
		return err
	}
	extIface, err := ipmatch.LookupExtIface(iface, "", "", ipStack, ipmatch.PublicIPOpts{})
	if err != nil {
		return fmt.Errorf("--iface %s: %w", iface, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	be, err := backend.NewManager(ctx, sm, extIface).GetBackend(config.BackendType)
	if err != nil {
		return err
	}
	bn, err := be.RegisterNetwork(ctx, &wg, config)
	if err != nil {
		return fmt.Errorf("register network: %w", err)
	}
	// Pod traffic is routed, never masqueraded; only the FORWARD accepts for the pod network are needed.
	tm := &iptables.IPTablesManager{}
	if err := tm.Init(ctx); err != nil {
		return err
	}
	tm.SetupAndEnsureForwardRules(ctx, config.Network, config.IPv6Network, 5)
	if err := sm.HandleSubnetFile(subnetFile, config, false, bn.Lease().Subnet, bn.Lease().IPv6Subnet, bn.MTU()); err != nil {
		return fmt.Errorf("subnet file: %w", err)
	}
	fmt.Printf("flanneld: ready subnet=%s\n", bn.Lease().Subnet)
	wg.Add(1)
	go func() {
		defer wg.Done()
		bn.Run(ctx)
	}()
	if err := sm.CompleteLease(ctx, bn.Lease(), &wg); err != nil {
		return fmt.Errorf("complete lease: %w", err)
	}
	<-ctx.Done()
	return nil
}
