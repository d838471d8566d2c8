"""``spec.listeners`` against a real kube-apiserver 1.20 + controllers, with kopf running for real.

The fake node (``fake-node-1``, registered by the fake kubelet as
``k8s-control-plane.sh fakenode`` does) gets an ExternalIP: the node address a
NodePort listener advertises. A load balancer is played by the test, which writes
``status.loadBalancer.ingress`` of the LoadBalancer Services as a cloud controller
would. Checked: the Services (type, port, target port, selector on the pod name),
the NameServer Deployment's listener ports, the brokers' ``listenerAddrsFile`` and its
ConfigMap, ``status.listeners`` with the learned and overridden addresses, and the
Services of a listener removed from the spec being deleted.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.harness import NODE, wait_for
from tests.k8s.test_operator import create, patch, status

NODE_IP = "192.0.2.10"  # TEST-NET-1: never a target, only a value in a status


def _listener_status(api: Any, namespace: str, name: str, listener: str) -> dict[str, Any] | None:
    return next((e for e in status(api, namespace, name).get("listeners") or [] if e["name"] == listener), None)


def _service(core: Any, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_service(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_listener_services_learned_addresses_and_status(api: Any, namespace: str, operator: Any) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.patch_node_status(NODE, {"status": {"addresses": [
        {"type": "InternalIP", "address": "10.0.0.10"}, {"type": "ExternalIP", "address": NODE_IP},
        {"type": "Hostname", "address": NODE}]}})
    listeners = [
        {"name": "internal", "type": "internal", "port": 9876},
        {"name": "external", "type": "nodeport", "port": 9886},
        {"name": "public", "type": "loadbalancer", "port": 9896,
         "addresses": [{"target": "lc-broker-slave-1-0", "address": "slave0.example.com:19896"}]},
    ]
    create(api, namespace, {"apiVersion": "rocket.dev/v1alpha1", "kind": "RocketCluster",
                            "metadata": {"name": "lc"},
                            "spec": {"nameServer": {"replicas": 1}, "broker": {"groups": 1, "replicasPerGroup": 1},
                                     "listeners": listeners}})
    pods = ("lc-broker-master-0", "lc-broker-slave-1-0")

    # -- the Services: one per broker pod and one for the NameServers, per external listener
    names = ["lc-nameserver-external", "lc-nameserver-public", *(f"{p}-{lst}" for p in pods
                                                                   for lst in ("external", "public"))]
    def all_services() -> dict[str, Any] | None:
        found = {n: _service(core, namespace, n) for n in names}
        return found if all(s is not None for s in found.values()) else None

    services = wait_for(all_services, 60, what=f"Services {names}")
    for listener, kind, port in (("external", "NodePort", 9886), ("public", "LoadBalancer", 9896)):
        ns_svc = services[f"lc-nameserver-{listener}"]
        assert ns_svc.spec.type == kind
        assert ns_svc.metadata.labels["rocket.dev/listener"] == listener
        assert [(p.port, p.target_port) for p in ns_svc.spec.ports] == [(port, port)]
        assert ns_svc.spec.selector == {"app.kubernetes.io/instance": "lc", "app.kubernetes.io/component": "nameserver"}
        for pod in pods:
            svc = services[f"{pod}-{listener}"]
            assert svc.spec.type == kind
            assert [(p.port, p.target_port) for p in svc.spec.ports] == [(port, 10911)]
            assert svc.spec.selector == {"app.kubernetes.io/instance": "lc", "app.kubernetes.io/component": "broker",
                                         "statefulset.kubernetes.io/pod-name": pod}
            assert svc.metadata.owner_references[0].kind == "RocketCluster"
            assert svc.spec.ports[0].node_port  # allocated by the API server for both kinds

    # -- the processes get their listener ports and address file
    deployment = apps.read_namespaced_deployment("lc-nameserver", namespace)
    container = deployment.spec.template.spec.containers[0]
    assert container.command[-4:] == ["--listener", "external:9886", "--listener", "public:9896"]
    assert {9886, 9896} <= {p.container_port for p in container.ports}
    sts = apps.read_namespaced_stateful_set("lc-broker-master", namespace)
    mounts = {m.name: m.mount_path for m in sts.spec.template.spec.containers[0].volume_mounts}
    assert mounts["listeners"] == "/etc/rocket-listeners"
    conf = core.read_namespaced_config_map("lc-broker-config", namespace).data["broker.conf"]
    assert "listenerAddrsFile=/etc/rocket-listeners/listeners.conf\n" in conf

    # -- nodeport: the node's ExternalIP and each Service's nodePort, once the pods are on the node
    node_ports = {n: s.spec.ports[0].node_port for n, s in services.items()}
    external = wait_for(lambda: (e := _listener_status(api, namespace, "lc", "external")) and len(e["brokers"]) == 2
                        and e["bootstrap"] and e, 60, what="status.listeners[external] with every address")
    assert external["type"] == "nodeport" and external["port"] == 9886
    assert external["bootstrap"] == [f"{NODE_IP}:{node_ports['lc-nameserver-external']}"]
    assert {b["pod"]: b["address"] for b in external["brokers"]} == {
        p: f"{NODE_IP}:{node_ports[f'{p}-external']}" for p in pods}
    assert {b["brokerName"] for b in external["brokers"]} == {"lc-broker-0"}
    internal = _listener_status(api, namespace, "lc", "internal")
    assert internal == {"name": "internal", "type": "internal", "port": 9876,
                        "bootstrap": [f"lc-nameserver.{namespace}.svc:9876"]}

    # -- loadbalancer: nothing but the override until the load balancers are assigned
    public = _listener_status(api, namespace, "lc", "public")
    assert public is not None and public["bootstrap"] == []
    assert {b["pod"]: b["address"] for b in public["brokers"]} == {"lc-broker-slave-1-0": "slave0.example.com:19896"}
    assert "listener public" in next(c for c in status(api, namespace, "lc")["conditions"]
                                     if c["type"] == "Progressing")["message"]
    for svc_name, ip in (("lc-nameserver-public", "198.51.100.1"), ("lc-broker-master-0-public", "198.51.100.2")):
        core.patch_namespaced_service_status(svc_name, namespace,
                                             {"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})
    public = wait_for(lambda: (e := _listener_status(api, namespace, "lc", "public")) and e["bootstrap"] and e, 60,
                      what="status.listeners[public] after the load balancers were assigned")
    assert public["bootstrap"] == ["198.51.100.1:9896"]
    assert {b["pod"]: b["address"] for b in public["brokers"]} == {
        "lc-broker-master-0": "198.51.100.2:9896", "lc-broker-slave-1-0": "slave0.example.com:19896"}

    # -- what the brokers read: one line per broker and listener
    text = wait_for(lambda: (core.read_namespaced_config_map("lc-broker-listeners", namespace).data or {})
                    .get("listeners.conf", "").count(".public=") == 2
                    and core.read_namespaced_config_map("lc-broker-listeners", namespace).data["listeners.conf"],
                    30, what="listeners.conf with the load balancer address", retry_on=(ApiException,))
    assert text.splitlines() == sorted([
        f"lc-broker-master-0.external={NODE_IP}:{node_ports['lc-broker-master-0-external']}",
        f"lc-broker-slave-1-0.external={NODE_IP}:{node_ports['lc-broker-slave-1-0-external']}",
        "lc-broker-master-0.public=198.51.100.2:9896",
        "lc-broker-slave-1-0.public=slave0.example.com:19896",
    ])

    # -- a listener removed from the spec: its Services go, the status follows
    patch(api, namespace, "lc", {"spec": {"listeners": listeners[:2]}})
    wait_for(lambda: all(_service(core, namespace, n) is None for n in names if n.endswith("-public")), 60,
             what="the public listener's Services deleted")
    wait_for(lambda: [e["name"] for e in status(api, namespace, "lc").get("listeners") or []]
             == ["internal", "external"], 30, what="status.listeners without public")
    assert all(_service(core, namespace, n) is not None for n in names if n.endswith("-external"))
