// Command vkvm-cluster is a real Kubernetes control plane in one binary, built
// from Kubernetes' published Go modules: embedded etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kubectl. It exists so vkvm's
// tests and quickstart run against the same code a production cluster runs.
//
// It is a multi-call binary (as hyperkube was): `up` owns etcd and the PKI and
// re-executes itself once per component, because the components keep global
// state (flags, feature gates, metrics registries) that must not be shared.
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubeproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = `vkvm-cluster: a local Kubernetes control plane for vkvm.

Usage:
  vkvm-cluster up --state-dir DIR [flags]   start etcd, apiserver, controller-manager, scheduler
  vkvm-cluster kubectl ARGS...              kubectl of the same Kubernetes release
  vkvm-cluster kubelet ARGS...              the kubelet of the same release (container nodes)
  vkvm-cluster kube-proxy ARGS...           kube-proxy of the same release
  vkvm-cluster flanneld --kubeconfig ...    flannel's daemon, host-gw only (container nodes)
  vkvm-cluster metrics-server ARGS...       metrics-server, the resource metrics API (HPA, kubectl top)
  vkvm-cluster version                      print the Kubernetes version this binary was built from

Run 'vkvm-cluster up --help' for the flags of up.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	sub, rest := os.Args[1], os.Args[2:]
	// cobra reads os.Args; drop the sub-command so each component sees its own flags.
	os.Args = append([]string{os.Args[0]}, rest...)
	switch sub {
	case "up":
		os.Exit(runUp(rest))
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand()))
	case "flanneld":
		os.Exit(runFlanneld(rest))
	case "metrics-server":
		os.Exit(runMetricsServer())
	case "kube-proxy":
		os.Exit(cli.Run(kubeproxy.NewProxyCommand()))
	case "kubectl":
		os.Exit(cli.Run(kubectlcmd.NewDefaultKubectlCommand()))
	case "version":
		fmt.Println(kubernetesVersion)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "vkvm-cluster: unknown command %q\n\n%s", sub, usage)
		os.Exit(2)
	}
}
