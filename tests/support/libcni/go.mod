module rdmans.test/libcni

go 1.26.0

require github.com/containernetworking/cni v1.3.0
