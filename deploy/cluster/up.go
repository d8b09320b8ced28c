package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// upConfig is the parsed command line of `up`.
type upConfig struct {
	stateDir               string
	bindAddress            string
	apiserverPort          int
	etcdClientPort         int
	etcdPeerPort           int
	controllerManagerPort  int
	schedulerPort          int
	clusterCIDR            string
	serviceCIDR            string
	nodeCIDRMaskSize       int
	nodeMonitorGracePeriod time.Duration
	etcdUnsafeNoFsync      bool
	readyTimeout           time.Duration
}

// component is one control-plane process started by `up`.
type component struct {
	name    string
	args    []string
	healthz string // HTTPS URL answering 200 once the component is ready
	cmd     *exec.Cmd
	logPath string
	exited  chan error
	// startedAt and restarts pace restarts after an exit (restartDelay).
	startedAt time.Time
	restarts  int
}

func parseUp(args []string) (*upConfig, error) {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	c := &upConfig{}
	fs.StringVar(&c.stateDir, "state-dir", "", "directory for PKI, etcd data, logs and kubeconfig (required)")
	fs.StringVar(&c.bindAddress, "bind-address", "127.0.0.1", "address every component listens on")
	fs.IntVar(&c.apiserverPort, "apiserver-port", 6443, "kube-apiserver secure port")
	fs.IntVar(&c.etcdClientPort, "etcd-client-port", 2379, "etcd client port")
	fs.IntVar(&c.etcdPeerPort, "etcd-peer-port", 2380, "etcd peer port")
	fs.IntVar(&c.controllerManagerPort, "controller-manager-port", 10257, "kube-controller-manager secure port")
	fs.IntVar(&c.schedulerPort, "scheduler-port", 10259, "kube-scheduler secure port")
	fs.StringVar(&c.clusterCIDR, "cluster-cidr", "10.244.0.0/16", "pod network; each node gets a slice as spec.podCIDR")
	fs.StringVar(&c.serviceCIDR, "service-cidr", "10.96.0.0/16", "service cluster IP range")
	fs.IntVar(&c.nodeCIDRMaskSize, "node-cidr-mask-size", 24, "prefix length of each node's podCIDR")
	fs.DurationVar(&c.nodeMonitorGracePeriod, "node-monitor-grace-period", 40*time.Second, "how long a node may miss heartbeats before it is marked NotReady")
	fs.BoolVar(&c.etcdUnsafeNoFsync, "etcd-unsafe-no-fsync", false, "skip fsync in etcd (tests only: loses data on power failure)")
	fs.DurationVar(&c.readyTimeout, "ready-timeout", 3*time.Minute, "how long to wait for every component to become ready")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.stateDir == "" {
		return nil, errors.New("--state-dir is required")
	}
	abs, err := filepath.Abs(c.stateDir)
	if err != nil {
		return nil, err
	}
	c.stateDir = abs
	return c, nil
}

func runUp(args []string) int {
	// Components die with up through Pdeathsig, which the kernel sends when the
	// thread that forked them exits: fork from one thread that lives as long as up.
	runtime.LockOSThread()
	cfg, err := parseUp(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "vkvm-cluster up: %v\n", err)
		return 2
	}
	if err := up(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "vkvm-cluster up: %v\n", err)
		return 1
	}
	return 0
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s vkvm-cluster: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
}

func up(cfg *upConfig) error {
	logsDir := filepath.Join(cfg.stateDir, "logs")
	if err := os.MkdirAll(logsDir, 0o700); err != nil {
		return err
	}
	lock, err := lockStateDir(cfg.stateDir, cfg.readyTimeout)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Keys, etcd's data and admin kubeconfigs: root's alone, in state dirs of older versions too.
	if err := restrictModes(cfg.stateDir); err != nil {
		return err
	}
	bindIP := net.ParseIP(cfg.bindAddress)
	if bindIP == nil {
		return fmt.Errorf("--bind-address %q is not an IP address", cfg.bindAddress)
	}
	serviceIP, err := firstServiceIP(cfg.serviceCIDR)
	if err != nil {
		return fmt.Errorf("--service-cidr: %w", err)
	}
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	p, err := ensurePKI(filepath.Join(cfg.stateDir, "pki"), []certSpec{
		{name: "apiserver", cn: "kube-apiserver", usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: []net.IP{bindIP, net.ParseIP("127.0.0.1"), serviceIP}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usages: clientAuth},
		{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}, usages: clientAuth},
		{name: "controller-manager", cn: "system:kube-controller-manager", usages: clientAuth},
		{name: "scheduler", cn: "system:kube-scheduler", usages: clientAuth},
		// etcd's server certificate is its client certificate too (its gRPC gateway dials etcd itself).
		{name: "etcd-server", cn: "vkvm-etcd", etcd: true, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			dns: []string{"localhost"}, ips: []net.IP{net.ParseIP("127.0.0.1")}},
		{name: "etcd-peer", cn: "vkvm-etcd-peer", etcd: true, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			dns: []string{"localhost"}, ips: []net.IP{net.ParseIP("127.0.0.1")}},
		{name: "apiserver-etcd-client", cn: "kube-apiserver-etcd-client", etcd: true, usages: clientAuth},
	})
	if err != nil {
		return err
	}
	// The aggregator's client certificate comes from its own CA, as kubeadm's
	// front-proxy-ca: an aggregated API server trusts that CA for identity
	// headers, so no certificate the cluster CA signs (CSRs) can forge them.
	if err := ensureFrontProxyPKI(p.path("front-proxy")); err != nil {
		return fmt.Errorf("front-proxy PKI: %w", err)
	}
	server := "https://" + net.JoinHostPort(cfg.bindAddress, strconv.Itoa(cfg.apiserverPort))
	for _, kc := range []struct{ file, cert, user string }{
		{"admin.kubeconfig", "admin", "kubernetes-admin"},
		{"controller-manager.kubeconfig", "controller-manager", "system:kube-controller-manager"},
		{"scheduler.kubeconfig", "scheduler", "system:kube-scheduler"},
	} {
		if err := writeKubeconfig(filepath.Join(cfg.stateDir, kc.file), server, p, kc.cert, kc.user); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", kc.file, err)
		}
	}

	if err := writeWebhookAdmission(cfg.stateDir, p.path("front-proxy")); err != nil {
		return fmt.Errorf("webhook admission configuration: %w", err)
	}

	etcd, err := startEtcd(cfg, p, logsDir)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()
	logf("etcd ready on %s", etcd.Clients[0].Addr())

	self, err := os.Executable()
	if err != nil {
		return err
	}
	components := controlPlane(cfg, p)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	started := []*component{}
	defer func() { stopAll(started) }()
	for _, c := range components {
		c.logPath = filepath.Join(logsDir, c.name+".log")
		if err := c.start(self); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		started = append(started, c)
		logf("started %s (pid %d), waiting for %s", c.name, c.cmd.Process.Pid, c.healthz)
		if err := c.waitReady(ctx, p, cfg.readyTimeout); err != nil {
			return fmt.Errorf("%s did not become ready: %w\n--- last lines of %s ---\n%s", c.name, err, c.logPath, tail(c.logPath, 40))
		}
		logf("%s ready", c.name)
	}
	if err := copyFile(filepath.Join(cfg.stateDir, "admin.kubeconfig"), filepath.Join(cfg.stateDir, "kubeconfig")); err != nil {
		return err
	}
	// The one line callers wait for; keep its shape stable.
	fmt.Printf("vkvm-cluster: ready kubeconfig=%s\n", filepath.Join(cfg.stateDir, "kubeconfig"))

	// A component that exits is started again, as the kubelet restarts a static pod: an apiserver that crashed
	// must not take etcd, the other components and (under vkvm up) the node's VMs down with it.
	type exit struct {
		c   *component
		err error
	}
	exited := make(chan exit, len(started))
	watch := func(c *component) {
		// The exit stays in c.exited for stopAll.
		go func(done chan error) { err := <-done; done <- err; exited <- exit{c, err} }(c.exited)
	}
	for _, c := range started {
		watch(c)
	}
	for {
		select {
		case <-ctx.Done():
			logf("stopping")
			return nil
		case e := <-exited:
			delay := e.c.restartDelay()
			logf("%s exited (%v); starting it again in %s\n--- last lines of its log ---\n%s", e.c.name, e.err, delay, tail(e.c.logPath, 20))
			select {
			case <-ctx.Done():
				logf("stopping")
				return nil
			case <-time.After(delay):
			}
			if err := e.c.start(self); err != nil {
				return fmt.Errorf("starting %s again: %w", e.c.name, err)
			}
			logf("started %s again (pid %d)", e.c.name, e.c.cmd.Process.Pid)
			watch(e.c)
		}
	}
}

// restartDelay is how long to wait before starting an exited component
// again: 1 s, doubling with each exit to 30 s, back to 1 s after a run of a
// minute or more.
func (c *component) restartDelay() time.Duration {
	if time.Since(c.startedAt) >= time.Minute {
		c.restarts = 0
	}
	delay := time.Second << min(c.restarts, 5)
	c.restarts++
	return min(delay, 30*time.Second)
}

func controlPlane(cfg *upConfig, p *pki) []*component {
	addr := cfg.bindAddress
	sd := cfg.stateDir
	pk := p.path
	fp := func(name string) string { return filepath.Join(pk("front-proxy"), name) }
	return []*component{
		{name: "kube-apiserver", healthz: fmt.Sprintf("https://%s/readyz", net.JoinHostPort(addr, strconv.Itoa(cfg.apiserverPort))), args: []string{
			"--bind-address=" + addr,
			"--advertise-address=" + addr,
			"--secure-port=" + strconv.Itoa(cfg.apiserverPort),
			"--etcd-servers=" + fmt.Sprintf("https://%s", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.etcdClientPort))),
			"--etcd-cafile=" + pk("etcd-ca.crt"),
			"--etcd-certfile=" + pk("apiserver-etcd-client.crt"),
			"--etcd-keyfile=" + pk("apiserver-etcd-client.key"),
			"--client-ca-file=" + pk("ca.crt"),
			"--tls-cert-file=" + pk("apiserver.crt"),
			"--tls-private-key-file=" + pk("apiserver.key"),
			// The apiserver reaches kubelets at their InternalIP and verifies
			// their serving certificates against the cluster CA.
			"--kubelet-client-certificate=" + pk("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + pk("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + pk("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP,Hostname",
			// The aggregation layer (APIService subresources.kubevirt.io): it
			// proxies with the front-proxy certificate and identity headers, and
			// dials the Service's endpoints, as no kube-proxy runs on this host.
			"--requestheader-client-ca-file=" + fp("ca.crt"),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + fp("front-proxy-client.crt"),
			"--proxy-client-key-file=" + fp("front-proxy-client.key"),
			"--enable-aggregator-routing=true",
			// vkvm's admission webhooks (the eviction webhook) authenticate
			// the apiserver by the same proxy certificate.
			"--admission-control-config-file=" + filepath.Join(sd, webhookAdmissionFile),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pk("sa.pub"),
			"--service-account-signing-key-file=" + pk("sa.key"),
			"--service-cluster-ip-range=" + cfg.serviceCIDR,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--enable-bootstrap-token-auth=true",
			"--allow-privileged=true",
			"--anonymous-auth=true",
			"--profiling=false",
		}},
		{name: "kube-controller-manager", healthz: fmt.Sprintf("https://%s/healthz", net.JoinHostPort(addr, strconv.Itoa(cfg.controllerManagerPort))), args: []string{
			"--bind-address=" + addr,
			"--secure-port=" + strconv.Itoa(cfg.controllerManagerPort),
			"--kubeconfig=" + filepath.Join(sd, "controller-manager.kubeconfig"),
			"--authentication-kubeconfig=" + filepath.Join(sd, "controller-manager.kubeconfig"),
			"--authorization-kubeconfig=" + filepath.Join(sd, "controller-manager.kubeconfig"),
			"--client-ca-file=" + pk("ca.crt"),
			"--root-ca-file=" + pk("ca.crt"),
			"--cluster-signing-cert-file=" + pk("ca.crt"),
			"--cluster-signing-key-file=" + pk("ca.key"),
			"--service-account-private-key-file=" + pk("sa.key"),
			"--use-service-account-credentials=true",
			"--controllers=*,bootstrapsigner,tokencleaner",
			"--allocate-node-cidrs=true",
			"--cluster-cidr=" + cfg.clusterCIDR,
			"--service-cluster-ip-range=" + cfg.serviceCIDR,
			"--node-cidr-mask-size=" + strconv.Itoa(cfg.nodeCIDRMaskSize),
			"--node-monitor-grace-period=" + cfg.nodeMonitorGracePeriod.String(),
			"--leader-elect=false",
			"--profiling=false",
		}},
		{name: "kube-scheduler", healthz: fmt.Sprintf("https://%s/readyz", net.JoinHostPort(addr, strconv.Itoa(cfg.schedulerPort))), args: []string{
			"--bind-address=" + addr,
			"--secure-port=" + strconv.Itoa(cfg.schedulerPort),
			"--kubeconfig=" + filepath.Join(sd, "scheduler.kubeconfig"),
			"--authentication-kubeconfig=" + filepath.Join(sd, "scheduler.kubeconfig"),
			"--authorization-kubeconfig=" + filepath.Join(sd, "scheduler.kubeconfig"),
			"--leader-elect=false",
			"--profiling=false",
		}},
	}
}

// startEtcd runs etcd on loopback with mutual TLS on both listeners: whoever
// reaches etcd owns the cluster, so only holders of an etcd-CA certificate
// (the apiserver) get in, not every local user.
func startEtcd(cfg *upConfig, p *pki, logsDir string) (*embed.Etcd, error) {
	ec := embed.NewConfig()
	ec.Name = "vkvm"
	ec.Dir = filepath.Join(cfg.stateDir, "etcd")
	client := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.etcdClientPort))}
	peer := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.etcdPeerPort))}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.ClientTLSInfo = transport.TLSInfo{CertFile: p.path("etcd-server.crt"), KeyFile: p.path("etcd-server.key"), TrustedCAFile: p.path("etcd-ca.crt"), ClientCertAuth: true}
	ec.PeerTLSInfo = transport.TLSInfo{CertFile: p.path("etcd-peer.crt"), KeyFile: p.path("etcd-peer.key"), TrustedCAFile: p.path("etcd-ca.crt"), ClientCertAuth: true}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.LogLevel = "warn"
	logPath := filepath.Join(logsDir, "etcd.log")
	// etcd's logger would create it world-readable.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	logFile.Close()
	ec.LogOutputs = []string{logPath}
	ec.UnsafeNoFsync = cfg.etcdUnsafeNoFsync
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(cfg.readyTimeout):
		e.Close()
		return nil, fmt.Errorf("not ready after %s\n%s", cfg.readyTimeout, tail(filepath.Join(logsDir, "etcd.log"), 40))
	}
}

func (c *component) start(self string) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	c.cmd = exec.Command(self, append([]string{c.name}, c.args...)...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// The kernel stops a component when `up` dies, however it dies.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	c.startedAt = time.Now()
	cmd, exited := c.cmd, make(chan error, 1)
	c.exited = exited
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	return nil
}

// waitReady polls the component's health endpoint until it answers 200, the
// process exits, or the deadline passes.
func (c *component) waitReady(ctx context.Context, p *pki, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.cert)
	// controller-manager and scheduler serve self-signed certificates; only the
	// apiserver's chains to the cluster CA.
	insecure := c.name != "kube-apiserver"
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, InsecureSkipVerify: insecure},
	}}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := client.Get(c.healthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case err := <-c.exited:
			c.exited <- err
			return fmt.Errorf("process exited: %v", err)
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("no 200 from %s after %s (last: %s)", c.healthz, timeout, last)
}

// stopAll stops components in reverse start order: SIGTERM, then SIGKILL
// after 10 s.
func stopAll(cs []*component) {
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			logf("%s did not stop within 10s; killing it", c.name)
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
}

const webhookAdmissionFile = "webhook-admission.yaml"

// webhookAdmissionConfig points the apiserver's webhook admission plugin at a
// kubeconfig of its own.
const webhookAdmissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: %s
`

// writeWebhookAdmission makes the apiserver present the front-proxy client
// certificate, which vkvm's subresource API already trusts from it, when it
// calls the webhooks behind Service kube-system/vkvm-subresources (the user
// name is the Service's DNS name; port 443 is left out), and nothing to any
// other webhook.
func writeWebhookAdmission(stateDir, frontProxyDir string) error {
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos["vkvm-subresources.kube-system.svc"] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(frontProxyDir, "front-proxy-client.crt"),
		ClientKey:         filepath.Join(frontProxyDir, "front-proxy-client.key"),
	}
	kubeconfig := filepath.Join(stateDir, "webhook-client.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, webhookAdmissionFile), []byte(fmt.Sprintf(webhookAdmissionConfig, kubeconfig)), 0o600)
}

func writeKubeconfig(path, server string, p *pki, certName, user string) error {
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	certPEM, err := os.ReadFile(p.path(certName + ".crt"))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(p.path(certName + ".key"))
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["vkvm"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	kc.Contexts["vkvm"] = &clientcmdapi.Context{Cluster: "vkvm", AuthInfo: user}
	kc.CurrentContext = "vkvm"
	return clientcmd.WriteToFile(*kc, path)
}

func firstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	ip := n.IP.To4()
	if ip == nil {
		return nil, errors.New("only IPv4 service ranges are supported")
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out, nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
