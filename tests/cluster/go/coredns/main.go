// CoreDNS with only the plugins the test node's Corefile uses (tests/cluster/node.py):
// errors, health, ready, kubernetes, cache, loadbalance. CoreDNS's own main links every
// in-tree plugin (cloud DNS providers, etcd, dnstap, geoip, ...), most of its build time on a
// cold machine; a main of our own with a shorter chain is how CoreDNS documents building a
// smaller server (its core/dnsserver.Directives).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, each registering itself with the server.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives: the plugin chain, in the order of CoreDNS's plugin.cfg.
var directives = []string{
	"ready",
	"health",
	"errors",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
