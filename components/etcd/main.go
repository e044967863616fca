// Command etcd: runs the upstream etcd server (go.etcd.io/etcd/server/v3/etcdmain) unchanged.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
