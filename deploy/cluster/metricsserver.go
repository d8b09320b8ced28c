package main

// metrics-server (sigs.k8s.io/metrics-server v0.8.0) joins vkvm-cluster's
// module: it is built on the same k8s.io modules (v0.33), so the control plane's
// replace directives pin it to this release and the build adds only its own
// packages. vkvm up runs it on the host (provider/cluster-services/metrics-server.ts).

import (
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	metricsserver "sigs.k8s.io/metrics-server/cmd/metrics-server/app"
)

func runMetricsServer() int {
	return cli.Run(metricsserver.NewMetricsServerCommand(genericapiserver.SetupSignalHandler()))
}
