// Command pause is the first process of every pod sandbox on the real test node.
//
// It holds the pod's namespaces open, reaps the orphans that exit inside the pod (it is
// pid 1 there) and exits 0 on SIGINT or SIGTERM. No registry is reachable from the test
// machines, so the node's pause image is built from this program instead of pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
