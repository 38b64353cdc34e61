// A container registry for the image tests: go-containerregistry's in-memory
// OCI distribution server (pkg/registry), on a loopback port of the kernel's
// choosing. It prints "listening on 127.0.0.1:PORT" once it accepts, then
// serves until killed. Nothing outside 127.0.0.1 can reach it.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Fprintf(os.Stdout, "listening on %s\n", listener.Addr())
	server := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(os.Stderr, "", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(server.Serve(listener))
}
