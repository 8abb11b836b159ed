#!/usr/bin/env python3
"""A minimal CRI v1 (runtime.v1.RuntimeService) client: the calls a kubelet makes for a pod.

    cri.py --sock PATH --gen DIR COMMAND ARGS...

--gen is the directory holding v1_pb2.py / v1_pb2_grpc.py, compiled by grpcio-tools from the
CRI v1 proto (tests/e2e/run.sh compiles them). Commands, each one gRPC call (except exec-in):

  version                                   runtime name/version and CRI API version
  run-pod NAME UID NAMESPACE LOGDIR         RunPodSandbox; prints the sandbox id
  pod-status ID                             PodSandboxStatus(verbose); prints JSON:
                                            {state, ip, netns (from the runtime spec), cniResult}
  stop-pod ID                               StopPodSandbox
  remove-pod ID                             RemovePodSandbox
  create-ctr POD NAME IMAGE LOGDIR CMD...   CreateContainer (with the pod's config); prints the id
  start-ctr ID / stop-ctr ID / remove-ctr ID
  exec ID CMD...                            ExecSync; prints stdout, exits with the command's code

The sandbox config (metadata, hostname, log directory, pod network namespace) is the same for
run-pod and create-ctr, as a kubelet sends it to both.
"""
import json
import sys

import grpc

TIMEOUT = 60  # seconds: every call is bounded


def sandbox_config(pb, name, uid, namespace, logdir):
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
        hostname=name,
        log_directory=logdir,
        labels={"app": "rdma-ns-e2e"},
        linux=pb.LinuxPodSandboxConfig(
            security_context=pb.LinuxSandboxSecurityContext(
                namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD)
            )
        ),
    )


def main(argv):
    args = list(argv)
    sock = gen = None
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--sock":
            sock = args.pop(0)
        elif opt == "--gen":
            gen = args.pop(0)
        else:
            sys.exit(f"unknown option {opt}")
    if not sock or not gen or not args:
        sys.exit(__doc__)
    sys.path.insert(0, gen)
    import v1_pb2 as pb  # noqa: E402  (generated at test time)
    import v1_pb2_grpc as pbg  # noqa: E402

    channel = grpc.insecure_channel("unix://" + sock)
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
    rt = pbg.RuntimeServiceStub(channel)
    cmd, rest = args[0], args[1:]

    if cmd == "version":
        r = rt.Version(pb.VersionRequest(version="v1"), timeout=TIMEOUT)
        print(f"{r.runtime_name} {r.runtime_version} CRI {r.runtime_api_version}")
    elif cmd == "run-pod":
        name, uid, namespace, logdir = rest
        r = rt.RunPodSandbox(
            pb.RunPodSandboxRequest(config=sandbox_config(pb, name, uid, namespace, logdir)),
            timeout=TIMEOUT,
        )
        print(r.pod_sandbox_id)
    elif cmd == "pod-status":
        (pod,) = rest
        r = rt.PodSandboxStatus(
            pb.PodSandboxStatusRequest(pod_sandbox_id=pod, verbose=True), timeout=TIMEOUT
        )
        info = json.loads(r.info.get("info", "{}"))
        netns = ""
        for ns in info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network":
                netns = ns.get("path", "")
        out = {
            "state": pb.PodSandboxState.Name(r.status.state),
            "ip": r.status.network.ip,
            "netns": netns,
            "cniResult": info.get("cniResult"),
        }
        print(json.dumps(out))
    elif cmd == "stop-pod":
        rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=rest[0]), timeout=TIMEOUT)
    elif cmd == "remove-pod":
        rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=rest[0]), timeout=TIMEOUT)
    elif cmd == "create-ctr":
        pod, name, image, logdir, *command = rest
        status = rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod), timeout=TIMEOUT)
        meta = status.status.metadata
        r = rt.CreateContainer(
            pb.CreateContainerRequest(
                pod_sandbox_id=pod,
                config=pb.ContainerConfig(
                    metadata=pb.ContainerMetadata(name=name, attempt=0),
                    image=pb.ImageSpec(image=image),
                    command=command,
                    log_path=f"{name}.log",
                    linux=pb.LinuxContainerConfig(),
                ),
                sandbox_config=sandbox_config(pb, meta.name, meta.uid, meta.namespace, logdir),
            ),
            timeout=TIMEOUT,
        )
        print(r.container_id)
    elif cmd == "start-ctr":
        rt.StartContainer(pb.StartContainerRequest(container_id=rest[0]), timeout=TIMEOUT)
    elif cmd == "stop-ctr":
        rt.StopContainer(pb.StopContainerRequest(container_id=rest[0], timeout=2), timeout=TIMEOUT)
    elif cmd == "remove-ctr":
        rt.RemoveContainer(pb.RemoveContainerRequest(container_id=rest[0]), timeout=TIMEOUT)
    elif cmd == "exec":
        ctr, *command = rest
        r = rt.ExecSync(
            pb.ExecSyncRequest(container_id=ctr, cmd=command, timeout=30), timeout=TIMEOUT
        )
        sys.stdout.write(r.stdout.decode(errors="replace"))
        sys.stderr.write(r.stderr.decode(errors="replace"))
        return r.exit_code
    else:
        sys.exit(f"unknown command {cmd}\n{__doc__}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except grpc.RpcError as e:
        print(f"CRI call failed: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(3)
    except grpc.FutureTimeoutError:
        print("CRI socket not ready within the timeout", file=sys.stderr)
        sys.exit(4)
