// Command coredns is CoreDNS with the plugins a Kubernetes cluster's DNS uses
// (kubeadm's Corefile): built in vkvm-cluster's module so its Kubernetes client
// is the control plane's release, and kept a binary of its own because it is
// the whole of the local CoreDNS image. bind: vkvm up runs it on the host, on
// node 1's address alone (provider/cluster-services/). The cloud backends of the stock build
// (route53, azure, clouddns) would triple its size and are not used here.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
