// libcni-run: drives a CNI network configuration list through libcni
// (github.com/containernetworking/cni/libcni, the library containerd's go-cni and CRI-O call),
// so that tests see what a runtime really sends: ADD, DEL and GC of a conflist, with libcni's
// own result cache and its own GC (DEL of the attachments it cached that are not valid, then
// GC with `cni.dev/valid-attachments` to every plugin of a 1.1.0 list).
//
//	libcni-run add|del --conflist F --bin-dir D[:D] --cache-dir C --container ID --netns P --ifname IF [--args K=V;K=V]
//	libcni-run gc --conflist F --bin-dir D[:D] --cache-dir C [--valid ID/IF ...]
//
// ADD prints the result; any failure prints libcni's error on stderr and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: libcni-run add|del|gc FLAGS"))
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	conflist := fs.String("conflist", "", "the network configuration list")
	binDir := fs.String("bin-dir", "", "plugin directories, colon separated")
	cacheDir := fs.String("cache-dir", "", "libcni's result cache")
	container := fs.String("container", "", "the container ID")
	netns := fs.String("netns", "", "the network namespace path")
	ifname := fs.String("ifname", "eth0", "the interface name")
	args := fs.String("args", "", "CNI_ARGS, K=V;K=V")
	var valid list
	fs.Var(&valid, "valid", "a valid attachment, ID/IF (gc)")
	_ = fs.Parse(os.Args[2:])

	netconf, err := libcni.ConfListFromFile(*conflist)
	if err != nil {
		fail(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(strings.Split(*binDir, ":"), *cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: *container, NetNS: *netns, IfName: *ifname}
	for _, kv := range strings.Split(*args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			rt.Args = append(rt.Args, [2]string{k, v})
		}
	}
	ctx := context.Background()
	switch cmd {
	case "add":
		res, err := cni.AddNetworkList(ctx, netconf, rt)
		if err != nil {
			fail(err)
		}
		_ = res.Print()
	case "del":
		err = cni.DelNetworkList(ctx, netconf, rt)
	case "gc":
		gc := &libcni.GCArgs{}
		for _, v := range valid {
			id, iface, _ := strings.Cut(v, "/")
			gc.ValidAttachments = append(gc.ValidAttachments, types.GCAttachment{ContainerID: id, IfName: iface})
		}
		err = cni.GCNetworkList(ctx, netconf, gc)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
