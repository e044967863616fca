// Command pstest serves Google's in-memory Pub/Sub fake
// (cloud.google.com/go/pubsub/v2/pstest) over gRPC until SIGINT/SIGTERM.
//
// It prints one line "PUBSUB_EMULATOR_HOST=<host:port>" on stdout once listening.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"cloud.google.com/go/pubsub/v2/pstest"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 0, "port to listen on (0 = a free port)")
	flag.Parse()

	srv := pstest.NewServerWithAddress(net.JoinHostPort(*host, strconv.Itoa(*port)))
	fmt.Printf("PUBSUB_EMULATOR_HOST=%s\n", srv.Addr)
	os.Stdout.Sync()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		os.Exit(1)
	}
}
