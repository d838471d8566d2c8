"""Listeners (``spec.listeners``): how clients outside the Kubernetes cluster reach it.

A RocketMQ route carries one address per broker, so every external listener
gets its own NameServer port whose routes carry the brokers' addresses on that
listener (:mod:`rocket.nameserver.listeners`). For an external listener
(``nodeport`` or ``loadbalancer``) ``L`` of cluster ``c`` the operator:

* creates a Service ``c-nameserver-L`` (type NodePort or LoadBalancer, port
  ``L.port`` -> the NameServers' listener port ``L.port``) and one Service
  ``<pod>-L`` per broker pod (selector ``statefulset.kubernetes.io/pod-name``,
  port ``L.port`` -> the broker's remoting port 10911), all labelled
  ``rocket.dev/listener=L``; Services of listeners no longer in the spec are deleted;
* runs the NameServers with ``--listener L:<port>``;
* learns each Service's reachable address: for a LoadBalancer its
  ``status.loadBalancer.ingress[0]`` (ip, else hostname) and ``L.port`` once the
  load balancer is assigned; for a NodePort the address of the node hosting the
  pod (its ``status.addresses``, first of ExternalDNS, ExternalIP, InternalDNS,
  InternalIP, Hostname, Strimzi's order) and the Service's ``nodePort``. An entry of
  ``L.addresses`` (target ``nameserver`` or a broker pod's name) is advertised instead;
* writes every broker's addresses into the ConfigMap ``c-broker-listeners``
  (key ``listeners.conf``, lines ``<pod>.<L>=host:port``: a pod's host name is its
  name, and its address follows the pod whatever brokerId or role it has, as with
  ``failover: Controller``), mounted
  in the broker pods at ``/etc/rocket-listeners`` and named by the broker setting
  ``listenerAddrsFile`` (:mod:`rocket.broker.listeners`): brokers re-read it at each
  registration, so a learned address reaches them without a restart;
* reports ``status.listeners[]``: name, type, port and ``bootstrap`` (the NameServer
  address(es) clients are given), and the broker addresses.

The ``internal`` listener is the existing ClusterIP/headless Services (port 9876).
Pure builders first, then :func:`sync_listeners`, the reconciliation step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocket_operator import names
from rocket_operator.builders import Manifest, Owner, _meta, nameserver_service_address
from rocket_operator.spec import BROKER_PORT, NAMESERVER_TARGET, ClusterSpec, ListenerSpec

#: Label of every listener Service: the listener's name.
LABEL_LISTENER = "rocket.dev/listener"
#: Label the StatefulSet controller puts on each pod: its name.
LABEL_POD_NAME = "statefulset.kubernetes.io/pod-name"
#: Where the broker pods mount the listeners ConfigMap, and its key.
LISTENERS_MOUNT = "/etc/rocket-listeners"
LISTENERS_FILE = "listeners.conf"
LISTENERS_VOLUME = "listeners"
#: Node address types in order of preference (Strimzi's default for NodePort listeners).
NODE_ADDRESS_ORDER = ("ExternalDNS", "ExternalIP", "InternalDNS", "InternalIP", "Hostname")
_SERVICE_TYPES = {"nodeport": "NodePort", "loadbalancer": "LoadBalancer"}


def external_listeners(spec: ClusterSpec) -> list[ListenerSpec]:
    """The ``nodeport`` and ``loadbalancer`` listeners of the spec, in spec order."""
    return [lst for lst in spec.listeners if lst.external]


def listeners_configmap_name(cluster: str) -> str:
    """``<cluster>-broker-listeners``: the brokers' addresses per listener."""
    return f"{cluster}-broker-listeners"


def nameserver_service_name(cluster: str, listener: str) -> str:
    """``<cluster>-nameserver-<listener>``: the NameServers' Service of an external listener."""
    return f"{cluster}-nameserver-{listener}"


def broker_service_name(pod: str, listener: str) -> str:
    """``<pod>-<listener>``: broker pod ``pod``'s Service of an external listener."""
    return f"{pod}-{listener}"


@dataclass(frozen=True, slots=True)
class BrokerPod:
    """A broker pod as the listeners see it: pod name, ``brokerName`` and ``brokerId``."""

    pod: str
    broker_name: str
    broker_id: int


def broker_pods(cluster: str, spec: ClusterSpec, groups: int) -> list[BrokerPod]:
    """Every broker pod of ``groups`` groups (masters and slaves), group by group."""
    return [BrokerPod(names.broker_pod(cluster, broker_id, group), names.broker_name(cluster, group), broker_id)
            for group in range(groups) for broker_id in range(spec.broker.replicas_per_group + 1)]


def _listener_service(owner: Owner, name: str, component: str, listener: ListenerSpec,
                      selector: Mapping[str, str], target_port: int) -> Manifest:
    labels = {**names.base_labels(owner.name, component), LABEL_LISTENER: listener.name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(owner, name, labels),
        "spec": {
            "type": _SERVICE_TYPES[listener.type],
            "selector": dict(selector),
            "publishNotReadyAddresses": component == names.COMPONENT_BROKER,
            "ports": [{"name": "remoting", "port": listener.port, "targetPort": target_port, "protocol": "TCP"}],
        },
    }


def build_listener_services(owner: Owner, spec: ClusterSpec, groups: int) -> list[Manifest]:
    """Every Service of the external listeners: per listener the NameServers' one
    (:func:`nameserver_service_name`) and one per broker pod of ``groups`` groups
    (:func:`broker_service_name`, selector on the pod's name)."""
    out: list[Manifest] = []
    pods = broker_pods(owner.name, spec, groups)
    for lst in external_listeners(spec):
        out.append(_listener_service(owner, nameserver_service_name(owner.name, lst.name), names.COMPONENT_NAMESERVER,
                                     lst, names.selector_labels(owner.name, names.COMPONENT_NAMESERVER), lst.port))
        for bp in pods:
            selector = {**names.selector_labels(owner.name, names.COMPONENT_BROKER), LABEL_POD_NAME: bp.pod}
            out.append(_listener_service(owner, broker_service_name(bp.pod, lst.name), names.COMPONENT_BROKER,
                                         lst, selector, BROKER_PORT))
    return out


def nameserver_listener_args(spec: ClusterSpec) -> list[str]:
    """Extra NameServer arguments: ``--listener <name>:<port>`` per external listener."""
    out: list[str] = []
    for lst in external_listeners(spec):
        out += ["--listener", f"{lst.name}:{lst.port}"]
    return out


def add_nameserver_listeners(deployment: Manifest, spec: ClusterSpec) -> Manifest:
    """The NameServer Deployment with each external listener's port: ``--listener`` appended to the
    container's command (``rocket.cli nameserver``) and a container port ``l-<name>`` (changed in place
    and returned; unchanged without external listeners)."""
    extra = nameserver_listener_args(spec)
    if not extra:
        return deployment
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [*container["command"], *extra]
    container["ports"] = [*container["ports"], *({"name": f"l-{lst.name}"[:15], "containerPort": lst.port,
                                                   "protocol": "TCP"} for lst in external_listeners(spec))]
    return deployment


def open_listener_ports(policies: list[Manifest], cluster: str, spec: ClusterSpec) -> list[Manifest]:
    """The cluster's NetworkPolicies (``spec.security.networkPolicies``) with the NameServers' one
    also admitting each external listener's port from anywhere, as their remoting port is (changed
    in place and returned; the brokers' Services target the remoting port, already open)."""
    extra = [{"protocol": "TCP", "port": lst.port} for lst in external_listeners(spec)]
    for policy in policies:
        if extra and policy["metadata"]["name"] == names.nameserver(cluster) and policy["spec"]["podSelector"][
                "matchLabels"] == names.selector_labels(cluster, names.COMPONENT_NAMESERVER):
            policy["spec"]["ingress"] = [*policy["spec"]["ingress"], {"ports": extra}]
    return policies


def broker_config(spec: ClusterSpec) -> dict[str, str]:
    """``broker.conf`` keys for the listeners: ``listenerAddrsFile`` when there is an external listener."""
    if not external_listeners(spec):
        return {}
    return {"listenerAddrsFile": f"{LISTENERS_MOUNT}/{LISTENERS_FILE}"}


def add_broker_listeners_volume(statefulset: Manifest, cluster: str, spec: ClusterSpec) -> Manifest:
    """A broker StatefulSet with the listeners ConfigMap mounted read-only at ``/etc/rocket-listeners``
    (an optional volume: pods start before the first address is learned). Changed in place and
    returned; unchanged without external listeners."""
    if not external_listeners(spec):
        return statefulset
    pod = statefulset["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": LISTENERS_VOLUME, "configMap": {
        "name": listeners_configmap_name(cluster), "optional": True}}]
    container = pod["containers"][0]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": LISTENERS_VOLUME, "mountPath": LISTENERS_MOUNT, "readOnly": True}]
    return statefulset


def listeners_config_text(addresses: Mapping[str, Mapping[BrokerPod, str]]) -> str:
    """``listeners.conf``: {listener: {broker pod: host:port}} as sorted lines
    ``<pod>.<listener>=<host:port>`` (host-name entries of :mod:`rocket.broker.listeners`)."""
    lines = sorted(f"{bp.pod}.{listener}={addr}\n"
                   for listener, table in addresses.items() for bp, addr in table.items())
    return "".join(lines)


def build_listeners_configmap(owner: Owner, text: str) -> Manifest:
    """ConfigMap ``<cluster>-broker-listeners`` with the key ``listeners.conf``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, listeners_configmap_name(owner.name),
                          names.base_labels(owner.name, names.COMPONENT_BROKER)),
        "data": {LISTENERS_FILE: text},
    }


def node_address(node: Mapping[str, Any] | None) -> str | None:
    """The node's address clients can use: the first of :data:`NODE_ADDRESS_ORDER` in its
    ``status.addresses``; None when it has none (or no node)."""
    addrs = ((node or {}).get("status") or {}).get("addresses") or []
    for kind in NODE_ADDRESS_ORDER:
        for entry in addrs:
            if entry.get("type") == kind and entry.get("address"):
                return str(entry["address"])
    return None


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def service_address(listener: ListenerSpec, service: Mapping[str, Any] | None, node: str | None) -> str | None:
    """The reachable ``host:port`` of a listener Service, or None while it cannot be learned.

    ``loadbalancer``: ``status.loadBalancer.ingress[0]`` ip (else hostname) and the listener's
    port. ``nodeport``: ``node`` (a node address) and the Service's ``nodePort``.
    """
    if service is None:
        return None
    if listener.type == "loadbalancer":
        for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            host = ingress.get("ip") or ingress.get("hostname")
            if host:
                return _host_port(str(host), listener.port)
        return None
    ports = (service.get("spec") or {}).get("ports") or []
    node_port = ports[0].get("nodePort") if ports else None
    if node is None or not node_port:
        return None
    return _host_port(node, int(node_port))


# -- the reconciliation step --------------------------------------------------------------------

@dataclass
class ListenersPart:
    """What :func:`sync_listeners` found: ``status`` (``status.listeners``, None = no listeners in
    the spec), ``waiting`` reasons and ``events``."""

    status: list[dict[str, Any]] | None = None
    waiting: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class _Observed:
    """The listener Services by name, and the address of the node hosting each pod (by pod name)."""

    services: dict[str, dict[str, Any]]
    pod_nodes: dict[str, str]
    nameserver_nodes: list[str]


async def _observe(ctx: Any, namespace: str, cluster: str, existing: list[dict[str, Any]], wanted: set[str],
                   node_addresses: bool) -> _Observed:
    live = {s["metadata"]["name"]: s for s in existing}
    missing = sorted(name for name in wanted if name not in live)
    for svc_name, svc in zip(missing, await asyncio.gather(
            *(ctx.kube.get("v1", "Service", namespace, n) for n in missing)), strict=True):
        if svc is not None:
            live[svc_name] = svc
    if not node_addresses:
        return _Observed(live, {}, [])
    pods = await ctx.kube.list("v1", "Pod", namespace, f"{names.LABEL_INSTANCE}={cluster}")
    pod_node = {p["metadata"]["name"]: str(p["spec"]["nodeName"])
                for p in pods if (p.get("spec") or {}).get("nodeName")}
    node_names = sorted(set(pod_node.values()))
    nodes = dict(zip(node_names, await asyncio.gather(*(ctx.kube.get("v1", "Node", "", n) for n in node_names)),
                     strict=True))
    pod_nodes = {pod: addr for pod, node in pod_node.items() if (addr := node_address(nodes.get(node)))}
    nameserver_pods = [p["metadata"]["name"] for p in pods
                       if (p["metadata"].get("labels") or {}).get(names.LABEL_COMPONENT) == names.COMPONENT_NAMESERVER]
    ns_nodes = sorted({pod_nodes[pod] for pod in nameserver_pods if pod in pod_nodes})
    return _Observed(live, pod_nodes, ns_nodes)


def listener_status(cluster: str, namespace: str, lst: ListenerSpec, pods: list[BrokerPod], seen: _Observed
                    ) -> tuple[dict[str, Any], dict[BrokerPod, str], list[str]]:
    """One ``status.listeners`` entry, the brokers' learned addresses and the targets still pending."""
    if not lst.external:
        return ({"name": lst.name, "type": lst.type, "port": lst.port,
                 "bootstrap": [nameserver_service_address(namespace, cluster)]}, {}, [])
    ns_svc = seen.services.get(nameserver_service_name(cluster, lst.name))
    if NAMESERVER_TARGET in lst.addresses:
        bootstrap = [lst.addresses[NAMESERVER_TARGET]]
    elif lst.type == "nodeport":
        bootstrap = [a for node in seen.nameserver_nodes if (a := service_address(lst, ns_svc, node))]
    else:
        bootstrap = [a] if (a := service_address(lst, ns_svc, None)) else []
    brokers: dict[BrokerPod, str] = {}
    pending: list[str] = [] if bootstrap else [NAMESERVER_TARGET]
    for bp in pods:
        addr = lst.addresses.get(bp.pod) or service_address(
            lst, seen.services.get(broker_service_name(bp.pod, lst.name)), seen.pod_nodes.get(bp.pod))
        if addr:
            brokers[bp] = addr
        else:
            pending.append(bp.pod)
    entry = {"name": lst.name, "type": lst.type, "port": lst.port, "bootstrap": bootstrap,
             "brokers": [{"pod": bp.pod, "brokerName": bp.broker_name, "address": addr}
                         for bp, addr in brokers.items()]}
    return entry, brokers, pending


async def sync_listeners(ctx: Any, seen: Any, spec: ClusterSpec, groups: int) -> ListenersPart:
    """Apply the external listeners' Services, delete those of removed listeners, learn every
    address, write the ``c-broker-listeners`` ConfigMap and return ``status.listeners``.

    ``ctx``/``seen``: the pass's :class:`~rocket_operator.steps.Context` and
    :class:`~rocket_operator.steps.Observed`; ``groups``: the broker StatefulSets' size. Waits
    (a reason per listener) while a Service's address cannot be learned and has no override.
    Raises :class:`~rocket_operator.kube.ApiError` when the API server refuses a write.
    """
    from rocket_operator.steps import apply_manifests

    part = ListenersPart()
    owner: Owner = seen.owner
    services = build_listener_services(owner, spec, groups)
    if services:
        await apply_manifests(ctx, seen.uid, services, force=False)
    wanted = {s["metadata"]["name"] for s in services}
    existing = await ctx.kube.list("v1", "Service", seen.namespace,
                                   f"{names.LABEL_INSTANCE}={seen.name},{LABEL_LISTENER}")
    for svc in existing:
        svc_name = svc["metadata"]["name"]
        if svc_name not in wanted:
            await ctx.kube.delete("v1", "Service", seen.namespace, svc_name)
            ctx.applied.pop((seen.uid, "Service", svc_name), None)
            part.events.append(("Normal", "ListenerServiceRemoved", f"removed Service {svc_name}"))
    if not spec.listeners:
        return part
    externals = external_listeners(spec)
    observed = await _observe(ctx, seen.namespace, seen.name, existing, wanted,
                              any(lst.type == "nodeport" for lst in externals))
    pods = broker_pods(seen.name, spec, groups)
    table: dict[str, dict[BrokerPod, str]] = {}
    part.status = []
    for lst in spec.listeners:
        entry, brokers, pending = listener_status(seen.name, seen.namespace, lst, pods, observed)
        part.status.append(entry)
        if lst.external:
            table[lst.name] = brokers
        if pending:
            shown = ", ".join(pending[:5]) + (" ..." if len(pending) > 5 else "")
            part.waiting.append(f"listener {lst.name}: address of {len(pending)} Service(s) not known yet ({shown})")
    if externals:
        await apply_manifests(ctx, seen.uid, [build_listeners_configmap(owner, listeners_config_text(table))],
                              force=False)
    return part
