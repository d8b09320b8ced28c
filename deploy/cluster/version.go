package main

// kubernetesVersion must match the k8s.io/kubernetes requirement in go.mod.
const kubernetesVersion = "v1.33.13"
